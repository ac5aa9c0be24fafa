package controller

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/fencestate"
)

func TestMarks(t *testing.T) {
	a, b, c := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}, types.NamespacedName{Namespace: "ns", Name: "c"}
	active := fencestate.Key{Status: fencestate.Active, Epoch: 2, Holder: "east", HolderEpoch: 2, Token: 10}
	fenced := fencestate.Key{Status: fencestate.Fenced, Epoch: 2, Holder: "west", HolderEpoch: 3}

	// step is one thing that happens to the tracker.
	type step func(m *Marks)
	begin := func(k fencestate.Key, names ...types.NamespacedName) step {
		return func(m *Marks) { m.begin(k, names) }
	}
	// reconcile is a reconcile that starts in the current generation and
	// decides with the state before → after.
	reconcile := func(n types.NamespacedName, before, after fencestate.Key, held bool) step {
		return func(m *Marks) { m.marked(n, m.generation(), before, after, held) }
	}
	tests := map[string]struct {
		steps []step
		want  MarkProgress
	}{
		"nothing began: not started": {
			want: MarkProgress{},
		},
		"a state with no Components is marked at once": {
			steps: []step{begin(active)},
			want:  MarkProgress{Started: true, Key: active},
		},
		"pending until every Component listed is marked for the state": {
			steps: []step{begin(fenced, a, b, c), reconcile(a, fenced, fenced, true), reconcile(b, fenced, fenced, true)},
			want:  MarkProgress{Started: true, Key: fenced, Pending: 1, Held: 2, Total: 2},
		},
		"all marked": {
			steps: []step{begin(fenced, a, b), reconcile(a, fenced, fenced, true), reconcile(b, fenced, fenced, true)},
			want:  MarkProgress{Started: true, Key: fenced, Held: 2, Total: 2},
		},
		"a decision across a transition is no mark for either state": {
			steps: []step{begin(fenced, a), reconcile(a, active, fenced, false)},
			want:  MarkProgress{Started: true, Key: fenced, Pending: 1, Total: 1},
		},
		"a decision with a state the tracker has not begun yet is no mark": {
			steps: []step{begin(active, a), reconcile(a, fenced, fenced, true)},
			want:  MarkProgress{Started: true, Key: active, Pending: 1, Held: 1, Total: 1},
		},
		"a reconcile that started before a new generation does not count for it": {
			steps: []step{
				begin(active, a),
				func(m *Marks) {
					gen := m.generation()
					m.begin(active, []types.NamespacedName{a})
					m.marked(a, gen, active, active, false)
				},
			},
			want: MarkProgress{Started: true, Key: active, Pending: 1, Total: 1},
		},
		"a new state makes every Component pending again": {
			steps: []step{begin(active, a, b), reconcile(a, active, active, false), reconcile(b, active, active, false), begin(fenced, a, b)},
			want:  MarkProgress{Started: true, Key: fenced, Pending: 2, Total: 2},
		},
		"a deleted Component is neither pending nor counted": {
			steps: []step{begin(fenced, a, b), reconcile(a, fenced, fenced, true), func(m *Marks) { m.gone(b) }},
			want:  MarkProgress{Started: true, Key: fenced, Held: 1, Total: 1},
		},
		"a Component created after the state began is counted, not waited for": {
			steps: []step{begin(active, a), reconcile(a, active, active, false), reconcile(c, active, active, false)},
			want:  MarkProgress{Started: true, Key: active, Total: 2},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := NewMarks()
			for _, s := range tc.steps {
				s(m)
			}
			if got := m.Progress(); got != tc.want {
				t.Errorf("progress = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestMarksSignal: every change of progress signals, without blocking, and
// a mark that changes nothing does not.
func TestMarksSignal(t *testing.T) {
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	k := fencestate.Key{Status: fencestate.Active}
	m := NewMarks()
	drained := func() bool {
		select {
		case <-m.Changes():
			return true
		default:
			return false
		}
	}
	m.begin(k, []types.NamespacedName{a})
	m.begin(k, []types.NamespacedName{a}) // coalesces, never blocks
	if !drained() || drained() {
		t.Fatal("begin must signal once, coalescing")
	}
	m.marked(a, m.generation(), k, k, false)
	if !drained() {
		t.Error("the last pending mark must signal")
	}
	m.marked(a, m.generation(), k, k, false)
	if drained() {
		t.Error("a mark that changes nothing must not signal")
	}
}

// BenchmarkMarked marks each of 10,000 Components for a new fence state,
// held, as a transition's re-marking does: each mark also returns the held
// count, which the reconciler publishes as a metric.
func BenchmarkMarked(b *testing.B) {
	const n = 10000
	names := make([]types.NamespacedName, n)
	for i := range names {
		names[i] = types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("comp-%05d", i)}
	}
	keys := []fencestate.Key{{Status: fencestate.Active, Token: 1}, {Status: fencestate.Fenced, Token: 2}}
	m := NewMarks()
	m.begin(keys[0], names)
	for i, name := range names {
		m.marked(name, m.generation(), keys[0], keys[0], i%2 == 0)
	}
	i := 0
	for b.Loop() {
		if i%n == 0 {
			m.begin(keys[i/n%2], names)
		}
		k := keys[i/n%2]
		m.marked(names[i%n], m.generation(), k, k, k.Status == fencestate.Fenced)
		i++
	}
}
