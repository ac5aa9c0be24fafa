package marks

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fencestate"
)

// fakeFence is a fence state source a test sets.
type fakeFence struct {
	state   fencestate.State
	written bool
}

func (f *fakeFence) Fence() (fencestate.State, bool) { return f.state, f.written }
func (f *fakeFence) Subscribe() <-chan struct{}      { return nil }

// errPlacing is the error of placing an object in namespace "broken".
var errPlacing = errors.New("namespace broken cannot be read")

// domainOf places an object by its label, else by its namespace: "west-*"
// namespaces are west's, "broken" cannot be read, any other is east's.
func domainOf(_ context.Context, namespace, label string) (string, error) {
	switch {
	case label != "":
		return label, nil
	case namespace == "broken":
		return "", errPlacing
	case len(namespace) > 5 && namespace[:5] == "west-":
		return "west", nil
	}
	return "east", nil
}

func object(namespace, name, label string) client.Object {
	o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if label != "" {
		o.Labels = map[string]string{domain.Label: label}
	}
	return o
}

// world is a Kind over two served domains, east and west, and what a test
// did with it.
type world struct {
	fences  map[string]*fakeFence
	kind    *Kind[bool]
	dec     *Decision[bool]
	err     error
	changed []string
}

func newWorld() *world {
	w := &world{fences: map[string]*fakeFence{"east": {}, "west": {}}}
	sources := map[string]fencestate.Source{}
	trackers := map[string]*Tracker[bool]{}
	for d, f := range w.fences {
		sources[d] = f
		trackers[d] = New(held)
	}
	w.kind = NewKind(Domains{Fences: sources, DomainOf: domainOf}, trackers, func(d string, t *Tracker[bool]) {
		w.changed = append(w.changed, fmt.Sprintf("%s:%d", d, t.Count()))
	})
	return w
}

func TestKind(t *testing.T) {
	ctx := context.Background()
	active := fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Name: "here", Epoch: 2}, Holder: fencestate.Cluster{Name: "here", Epoch: 2}, Token: 7}
	fenced := fencestate.State{Status: fencestate.Fenced, Cluster: fencestate.Cluster{Name: "here", Epoch: 2}, Holder: fencestate.Cluster{Name: "there", Epoch: 3}}
	unknown := fencestate.State{Status: fencestate.Unknown}
	a := object("app", "a", "")           // east's by its namespace
	aWest := object("app", "a", "west")   // the same object, relabelled to west
	aNorth := object("app", "a", "north") // relabelled to a domain not served
	b := object("west-app", "b", "")      // west's by its namespace
	broken := object("broken", "a", "")   // cannot be placed
	name := client.ObjectKeyFromObject

	type step func(w *world)
	at := func(d string, s fencestate.State) step {
		return func(w *world) { w.fences[d].state, w.fences[d].written = s, true }
	}
	// begin starts a generation of d for its state now, as the source
	// does on a transition.
	begin := func(d string, objs ...client.Object) step {
		return func(w *world) {
			names := make([]types.NamespacedName, len(objs))
			for i, o := range objs {
				names[i] = name(o)
			}
			w.kind.Tracker(d).Begin(w.kind.Domains().State(d).Key(), names)
		}
	}
	decide := func(o client.Object) step {
		return func(w *world) { w.dec, w.err = w.kind.Decide(ctx, o) }
	}
	var decided step = func(w *world) { w.dec.Decided() }
	mark := func(v bool) step { return func(w *world) { w.dec.Mark(v) } }
	// reconcile is a whole reconcile with no transition in it.
	reconcile := func(o client.Object, v bool) []step { return []step{decide(o), decided, mark(v)} }
	forget := func(o client.Object) step { return func(w *world) { w.kind.Forget(name(o)) } }
	// reset forgets what the steps so far changed, for the cases that
	// are about the last ones.
	var reset step = func(w *world) { w.changed = nil }
	steps := func(groups ...any) []step {
		var all []step
		for _, g := range groups {
			switch g := g.(type) {
			case step:
				all = append(all, g)
			case []step:
				all = append(all, g...)
			}
		}
		return all
	}

	// decision is what the last Decide said.
	type decision struct {
		domain        string
		before, after fencestate.Status
	}
	tests := map[string]struct {
		steps   []step
		want    map[string]progress
		changed []string
		// decision is the last Decide's, checked when set.
		decision *decision
		err      error
	}{
		"marked in its domain for the generation's state": {
			steps:    steps(at("east", active), at("west", fenced), begin("east", a), begin("west", b), reconcile(a, true)),
			want:     map[string]progress{"east": {Started: true, Key: active.Key(), Count: 1, Total: 1}, "west": {Started: true, Key: fenced.Key(), Pending: 1}},
			changed:  []string{"east:1"},
			decision: &decision{domain: "east", before: fencestate.Active, after: fencestate.Active},
		},
		"each domain's objects in its own tracker": {
			steps: steps(at("east", active), at("west", fenced), begin("east", a), begin("west", b), reconcile(a, false), reconcile(b, true)),
			want:  map[string]progress{"east": {Started: true, Key: active.Key(), Total: 1}, "west": {Started: true, Key: fenced.Key(), Count: 1, Total: 1}},
		},
		"an object that moved is forgotten in the domain it left": {
			steps:    steps(at("east", active), at("west", fenced), begin("east", a), reconcile(a, true), reset, reconcile(aWest, true)),
			want:     map[string]progress{"east": {Started: true, Key: active.Key()}, "west": {Count: 1, Total: 1}},
			changed:  []string{"east:0", "west:1"},
			decision: &decision{domain: "west", before: fencestate.Fenced, after: fencestate.Fenced},
		},
		"an object that moved before it was marked is no longer waited for where it was": {
			steps: steps(at("east", active), begin("east", a), reconcile(aWest, false)),
			want:  map[string]progress{"east": {Started: true, Key: active.Key()}, "west": {Total: 1}},
		},
		"a transition during the decision: no mark for either state": {
			steps:    steps(at("east", active), begin("east", a), decide(a), at("east", fenced), decided, mark(true)),
			want:     map[string]progress{"east": {Started: true, Key: active.Key(), Pending: 1, Count: 1, Total: 1}, "west": {}},
			decision: &decision{domain: "east", before: fencestate.Active, after: fencestate.Fenced},
		},
		"a transition during the decision, its generation begun before the mark: no mark for it": {
			steps: steps(at("east", active), begin("east", a), decide(a), at("east", fenced), begin("east", a), decided, mark(true)),
			want:  map[string]progress{"east": {Started: true, Key: fenced.Key(), Pending: 1, Count: 1, Total: 1}, "west": {}},
		},
		"a generation begun during the decision for the same state: no mark for it": {
			steps: steps(at("east", active), begin("east", a), decide(a), begin("east", a), decided, mark(true)),
			want:  map[string]progress{"east": {Started: true, Key: active.Key(), Pending: 1, Count: 1, Total: 1}, "west": {}},
		},
		"a mark without the state after the decision counts for no generation": {
			steps: steps(at("east", active), begin("east", a), decide(a), mark(true)),
			want:  map[string]progress{"east": {Started: true, Key: active.Key(), Pending: 1, Count: 1, Total: 1}, "west": {}},
		},
		"before its agent wrote a state the domain's state is unknown, and marks count for it": {
			steps:    steps(begin("east", a), reconcile(a, true)),
			want:     map[string]progress{"east": {Started: true, Key: unknown.Key(), Count: 1, Total: 1}, "west": {}},
			decision: &decision{domain: "east", before: fencestate.Unknown, after: fencestate.Unknown},
		},
		"a domain not served takes no mark, and the object leaves the served one": {
			steps:    steps(at("east", active), begin("east", a), reconcile(a, true), reset, reconcile(aNorth, true)),
			want:     map[string]progress{"east": {Started: true, Key: active.Key()}, "west": {}},
			changed:  []string{"east:0"},
			decision: &decision{domain: "north", before: fencestate.Unknown, after: fencestate.Unknown},
		},
		"forgotten: in no domain": {
			steps:   steps(at("east", active), begin("east", a), reconcile(a, true), reset, forget(a), forget(a)),
			want:    map[string]progress{"east": {Started: true, Key: active.Key()}, "west": {}},
			changed: []string{"east:0"},
		},
		"forgotten before it was marked: no longer waited for": {
			steps: steps(at("east", active), begin("east", a), forget(a)),
			want:  map[string]progress{"east": {Started: true, Key: active.Key()}, "west": {}},
		},
		"an object that cannot be placed keeps its marks": {
			steps: steps(at("east", active), begin("east", a), reconcile(a, true), reset, decide(broken)),
			want:  map[string]progress{"east": {Started: true, Key: active.Key(), Count: 1, Total: 1}, "west": {}},
			err:   errPlacing,
		},
	}
	for tn, tc := range tests {
		t.Run(tn, func(t *testing.T) {
			w := newWorld()
			for _, s := range tc.steps {
				s(w)
			}
			if !errors.Is(w.err, tc.err) {
				t.Fatalf("Decide error = %v, want %v", w.err, tc.err)
			}
			got := map[string]progress{}
			for d := range w.fences {
				got[d] = progressOf(w.kind.Tracker(d))
			}
			for _, d := range slices.Sorted(maps.Keys(got)) {
				if got[d] != tc.want[d] {
					t.Errorf("%s: progress = %+v, want %+v", d, got[d], tc.want[d])
				}
			}
			if tc.changed != nil && !slices.Equal(w.changed, tc.changed) {
				t.Errorf("changed = %v, want %v", w.changed, tc.changed)
			}
			if tc.decision != nil {
				got := decision{w.dec.Domain, w.dec.Before.Status, w.dec.After.Status}
				if got != *tc.decision {
					t.Errorf("decision = %+v, want %+v", got, *tc.decision)
				}
			}
		})
	}
}
