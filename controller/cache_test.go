package controller

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// conditionFields is a status entry's fieldsV1 that owns the whole of the
// conditions of types, and status.access when access.
func conditionFields(access bool, types ...string) *metav1.FieldsV1 {
	conds := map[string]any{".": map[string]any{}}
	for _, t := range types {
		conds[fmt.Sprintf("k:{%q:%q}", "type", t)] = map[string]any{
			".": map[string]any{}, "f:lastTransitionTime": map[string]any{}, "f:message": map[string]any{},
			"f:observedGeneration": map[string]any{}, "f:reason": map[string]any{}, "f:status": map[string]any{}, "f:type": map[string]any{},
		}
	}
	status := map[string]any{"f:conditions": conds}
	if access {
		status["f:access"] = map[string]any{}
	}
	if len(types) == 0 {
		delete(status, "f:conditions")
	}
	raw, err := json.Marshal(map[string]any{"f:status": status})
	if err != nil {
		panic(err)
	}
	return metav1.NewFieldsV1(string(raw))
}

// trimmedFields is what TrimComponent leaves of conditionFields(_, types).
func trimmedFields(types ...string) *metav1.FieldsV1 {
	conds := map[string]any{}
	for _, t := range types {
		conds[fmt.Sprintf("k:{%q:%q}", "type", t)] = map[string]any{}
	}
	raw, err := json.Marshal(map[string]any{"f:status": map[string]any{"f:conditions": conds}})
	if err != nil {
		panic(err)
	}
	return metav1.NewFieldsV1(string(raw))
}

var at = metav1.Unix(1_700_000_000, 0)

// entry is a managedFields entry of manager on subresource.
func entry(manager string, op metav1.ManagedFieldsOperationType, subresource string, fields *metav1.FieldsV1) metav1.ManagedFieldsEntry {
	return metav1.ManagedFieldsEntry{
		Manager: manager, Operation: op, APIVersion: "fencegate.dev/v1alpha1", Time: &at,
		FieldsType: "FieldsV1", FieldsV1: fields, Subresource: subresource,
	}
}

// appliedComponent is a Component as kubectl apply (client-side) leaves it,
// with its status written by fencegate, an actuator and an earlier release
// of fencegate that wrote the whole status by update.
func appliedComponent() *fencegatev1alpha1.Component {
	return &fencegatev1alpha1.Component{
		ObjectMeta: metav1.ObjectMeta{
			Name: "billing", Namespace: "payments",
			Labels: map[string]string{"app": "billing"},
			Annotations: map[string]string{
				LastAppliedAnnotation: `{"apiVersion":"fencegate.dev/v1alpha1","kind":"Component","metadata":{"annotations":{"team":"payments"},"name":"billing","namespace":"payments"},"spec":{"enabled":true}}`,
				"team":                "payments",
			},
			ManagedFields: []metav1.ManagedFieldsEntry{
				entry("kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, "",
					metav1.NewFieldsV1(`{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{},"f:team":{}},"f:labels":{".":{},"f:app":{}}},"f:spec":{".":{},"f:enabled":{}}}`)),
				entry(FieldManager, metav1.ManagedFieldsOperationApply, "status", conditionFields(false, "SourceConflict")),
				entry("example-actuator", metav1.ManagedFieldsOperationApply, "status", conditionFields(true, "Ready")),
				entry("fencegate", metav1.ManagedFieldsOperationUpdate, "status", conditionFields(false, "Ready", "Stalled")),
				entry("metrics-exporter", metav1.ManagedFieldsOperationApply, "status", conditionFields(true)),
			},
		},
		Spec: fencegatev1alpha1.ComponentSpec{Enabled: true},
	}
}

func TestTrimComponent(t *testing.T) {
	unreadable := entry("odd", metav1.ManagedFieldsOperationUpdate, "status", metav1.NewFieldsV1(`not json`))
	tests := map[string]struct {
		in   func() *fencegatev1alpha1.Component
		want func() *fencegatev1alpha1.Component
	}{
		"applied by kubectl, status shared": {
			in: appliedComponent,
			want: func() *fencegatev1alpha1.Component {
				c := appliedComponent()
				c.Annotations = map[string]string{"team": "payments"}
				c.ManagedFields = []metav1.ManagedFieldsEntry{
					entry("example-actuator", metav1.ManagedFieldsOperationApply, "status", trimmedFields("Ready")),
					entry("fencegate", metav1.ManagedFieldsOperationUpdate, "status", trimmedFields("Ready", "Stalled")),
				}
				for i := range c.ManagedFields {
					c.ManagedFields[i].Time = nil
				}
				return c
			},
		},
		"the last-applied annotation alone": {
			in: func() *fencegatev1alpha1.Component {
				c := appliedComponent()
				c.Annotations = map[string]string{LastAppliedAnnotation: "{}"}
				c.ManagedFields = nil
				return c
			},
			want: func() *fencegatev1alpha1.Component {
				c := appliedComponent()
				c.Annotations, c.ManagedFields = nil, nil
				return c
			},
		},
		"only fencegate owns the status": {
			in: func() *fencegatev1alpha1.Component {
				c := appliedComponent()
				c.ManagedFields = c.ManagedFields[:2]
				return c
			},
			want: func() *fencegatev1alpha1.Component {
				c := appliedComponent()
				c.Annotations = map[string]string{"team": "payments"}
				c.ManagedFields = nil
				return c
			},
		},
		"an unreadable entry is kept whole": {
			in: func() *fencegatev1alpha1.Component {
				c := appliedComponent()
				c.ManagedFields = append(c.ManagedFields[:1], unreadable)
				return c
			},
			want: func() *fencegatev1alpha1.Component {
				c := appliedComponent()
				c.Annotations = map[string]string{"team": "payments"}
				c.ManagedFields = []metav1.ManagedFieldsEntry{unreadable}
				return c
			},
		},
		"nothing to trim": {
			in: func() *fencegatev1alpha1.Component {
				return &fencegatev1alpha1.Component{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "payments"}}
			},
			want: func() *fencegatev1alpha1.Component {
				return &fencegatev1alpha1.Component{ObjectMeta: metav1.ObjectMeta{Name: "bare", Namespace: "payments"}}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			orig := tc.in()
			out, err := TrimComponent(tc.in())
			if err != nil {
				t.Fatal(err)
			}
			got := out.(*fencegatev1alpha1.Component)
			if want := tc.want(); !equalComponents(t, got, want) {
				t.Errorf("TrimComponent =\n%+v\nwant\n%+v", got.ObjectMeta, want.ObjectMeta)
			}
			// The controller reads the same owners from what is cached.
			for _, cond := range []string{"Ready", "Stalled", "SourceConflict", "Progressing"} {
				if g, w := ownedByOthers(got, cond), ownedByOthers(orig, cond); g != w {
					t.Errorf("ownedByOthers(trimmed, %s) = %v, want %v as of the whole Component", cond, g, w)
				}
			}
			again, _ := TrimComponent(got.DeepCopy())
			if !equalComponents(t, again.(*fencegatev1alpha1.Component), got) {
				t.Errorf("TrimComponent twice = %+v, want what it left once", again.(*fencegatev1alpha1.Component).ObjectMeta)
			}
		})
	}
}

// equalComponents compares Components with their fieldsV1 sets as JSON
// values, not bytes.
func equalComponents(t *testing.T, a, b *fencegatev1alpha1.Component) bool {
	t.Helper()
	norm := func(c *fencegatev1alpha1.Component) *fencegatev1alpha1.Component {
		c = c.DeepCopy()
		for i, f := range c.ManagedFields {
			var v any
			if f.FieldsV1 == nil || json.Unmarshal(f.FieldsV1.GetRawBytes(), &v) != nil {
				continue
			}
			raw, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			c.ManagedFields[i].FieldsV1 = metav1.NewFieldsV1(string(raw))
		}
		return c
	}
	return reflect.DeepEqual(norm(a), norm(b))
}

func TestTrimLeavesOtherObjects(t *testing.T) {
	mf := []any{map[string]any{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": map[string]any{"f:spec": map[string]any{}}}}
	tests := map[string]struct {
		transform func(any) (any, error)
		in        any
	}{
		"an unstructured Component": {TrimComponent, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "fencegate.dev/v1alpha1", "kind": "Component",
			"metadata": map[string]any{"name": "a", "annotations": map[string]any{LastAppliedAnnotation: "{}"}, "managedFields": mf},
		}}},
		"an unstructured Namespace": {TrimNamespace, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": "a", "managedFields": mf},
		}}},
		"a tombstone": {TrimComponent, "payments/billing"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			before := fmt.Sprintf("%#v", tc.in)
			out, err := tc.transform(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if after := fmt.Sprintf("%#v", out); after != before {
				t.Errorf("transform changed %s:\n%s\nwant\n%s", name, after, before)
			}
		})
	}
}

func TestTrimNamespace(t *testing.T) {
	tests := map[string]struct {
		in, want metav1.ObjectMeta
	}{
		"labelled and applied": {
			in: metav1.ObjectMeta{
				Name: "payments", Labels: map[string]string{"fencegate.dev/domain": "payments"},
				Annotations:   map[string]string{LastAppliedAnnotation: "{}", "owner": "team-a"},
				ManagedFields: []metav1.ManagedFieldsEntry{entry("kubectl-client-side-apply", metav1.ManagedFieldsOperationUpdate, "", metav1.NewFieldsV1(`{"f:metadata":{}}`))},
			},
			want: metav1.ObjectMeta{
				Name: "payments", Labels: map[string]string{"fencegate.dev/domain": "payments"},
				Annotations: map[string]string{"owner": "team-a"},
			},
		},
		"bare": {in: metav1.ObjectMeta{Name: "default"}, want: metav1.ObjectMeta{Name: "default"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, err := TrimNamespace(&corev1.Namespace{ObjectMeta: tc.in, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}})
			if err != nil {
				t.Fatal(err)
			}
			want := &corev1.Namespace{ObjectMeta: tc.want, Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
			if !reflect.DeepEqual(out, want) {
				t.Errorf("TrimNamespace = %+v, want %+v", out, want)
			}
		})
	}
}
