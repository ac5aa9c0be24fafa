package marks

import (
	"context"
	"errors"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fencestate"
)

func TestDomainsState(t *testing.T) {
	fenced := fencestate.State{Status: fencestate.Fenced, Token: 3}
	ds := Domains{Fences: map[string]fencestate.Source{
		"east": &fakeFence{state: fenced, written: true},
		"west": &fakeFence{},
	}}
	tests := map[string]struct {
		domain string
		want   fencestate.State
	}{
		"a served domain's state":            {domain: "east", want: fenced},
		"unknown before its agent wrote one": {domain: "west", want: fencestate.State{Status: fencestate.Unknown}},
		"unknown for a domain not served":    {domain: "north", want: fencestate.State{Status: fencestate.Unknown}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := ds.State(tc.domain); got.Key() != tc.want.Key() {
				t.Errorf("State(%q) = %v, want %v", tc.domain, got.Key(), tc.want.Key())
			}
		})
	}
}

func TestIn(t *testing.T) {
	cm := func(namespace, name, label string) corev1.ConfigMap {
		return *object(namespace, name, label).(*corev1.ConfigMap)
	}
	items := []corev1.ConfigMap{
		cm("app", "a", ""), cm("app", "b", "west"), cm("west-app", "c", ""), cm("west-app", "d", "east"), cm("app", "e", ""),
	}
	n := func(namespace, name string) types.NamespacedName {
		return types.NamespacedName{Namespace: namespace, Name: name}
	}
	tests := map[string]struct {
		domain string
		items  []corev1.ConfigMap
		want   []types.NamespacedName
		err    error
	}{
		"by namespace and by label": {domain: "east", items: items, want: []types.NamespacedName{n("app", "a"), n("west-app", "d"), n("app", "e")}},
		"the other domain":          {domain: "west", items: items, want: []types.NamespacedName{n("app", "b"), n("west-app", "c")}},
		"none":                      {domain: "north", items: items},
		"a namespace that cannot be placed fails the list": {
			domain: "east", items: append(slices.Clone(items), cm("broken", "f", "")), err: errPlacing,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			asked := 0
			ds := Domains{DomainOf: func(ctx context.Context, namespace, label string) (string, error) {
				asked++
				return domainOf(ctx, namespace, label)
			}}
			got, err := In(context.Background(), ds, tc.domain, tc.items)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error = %v, want %v", err, tc.err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("In = %v, want %v", got, tc.want)
			}
			if tc.err == nil && asked != 4 {
				t.Errorf("DomainOf asked %d times, want once for each of the 4 namespace and label pairs", asked)
			}
		})
	}
}

func TestDomainLabelChanged(t *testing.T) {
	ns := func(label string) *corev1.Namespace {
		n := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "app", Labels: map[string]string{"team": "a"}}}
		if label != "" {
			n.Labels[domain.Label] = label
		}
		return n
	}
	tests := map[string]struct {
		old, new string
		want     bool
	}{
		"labelled":              {old: "", new: "west", want: true},
		"relabelled":            {old: "east", new: "west", want: true},
		"unlabelled":            {old: "east", new: "", want: true},
		"the domain label kept": {old: "east", new: "east"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := DomainLabelChanged.Update(event.UpdateEvent{ObjectOld: ns(tc.old), ObjectNew: ns(tc.new)}); got != tc.want {
				t.Errorf("Update passes = %v, want %v", got, tc.want)
			}
		})
	}
	if DomainLabelChanged.Create(event.CreateEvent{Object: ns("east")}) || DomainLabelChanged.Delete(event.DeleteEvent{Object: ns("east")}) {
		t.Error("a namespace created or deleted moves nothing: its objects are decided on their own events")
	}
}
