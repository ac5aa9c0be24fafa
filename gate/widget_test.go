package gate_test

import (
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// widgetVersion is the tests' own kind's (testdata/widgets.yaml): an
// operator's resource with conditions, which the Gate marks itself.
var widgetVersion = schema.GroupVersion{Group: "gate.example.dev", Version: "v1"}

// Widget is an object of the kind.
type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            WidgetStatus `json:"status,omitempty"`
}

// WidgetStatus holds its conditions.
type WidgetStatus struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

func (w *Widget) DeepCopyObject() runtime.Object {
	out := *w
	w.DeepCopyInto(&out.ObjectMeta)
	out.Status.Conditions = slices.Clone(w.Status.Conditions)
	return &out
}

// GetConditions makes a Widget gate.Conditioned: the Gate marks it.
func (w *Widget) GetConditions() []metav1.Condition { return w.Status.Conditions }

// WidgetList is a list of Widgets.
type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

func (l *WidgetList) DeepCopyObject() runtime.Object {
	out := *l
	l.DeepCopyInto(&out.ListMeta)
	out.Items = make([]Widget, len(l.Items))
	for i := range l.Items {
		out.Items[i] = *l.Items[i].DeepCopyObject().(*Widget)
	}
	return &out
}

// addWidgets registers the Widget kind in scheme.
func addWidgets(scheme *runtime.Scheme) {
	scheme.AddKnownTypes(widgetVersion, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(scheme, widgetVersion)
}
