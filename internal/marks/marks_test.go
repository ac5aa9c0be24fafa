package marks

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/fencestate"
)

// progress is what a tracker says, without its values.
type progress struct {
	Started               bool
	Key                   fencestate.Key
	Pending, Count, Total int
}

func progressOf[V comparable](t *Tracker[V]) progress {
	var p progress
	t.Read(func(v View[V]) {
		p = progress{Started: v.Started, Key: v.Key, Pending: v.Pending, Count: v.Counted, Total: len(v.Values)}
	})
	return p
}

func held(v bool) bool { return v }

func TestTracker(t *testing.T) {
	a, b, c := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}, types.NamespacedName{Namespace: "ns", Name: "c"}
	active := fencestate.Key{Status: fencestate.Active, Epoch: 2, Holder: "east", HolderEpoch: 2, Token: 10}
	fenced := fencestate.Key{Status: fencestate.Fenced, Epoch: 2, Holder: "west", HolderEpoch: 3}

	// step is one thing that happens to the tracker.
	type step func(m *Tracker[bool])
	begin := func(k fencestate.Key, names ...types.NamespacedName) step {
		return func(m *Tracker[bool]) { m.Begin(k, names) }
	}
	// reconcile is a reconcile that starts in the current generation and
	// decides with the state before → after.
	reconcile := func(n types.NamespacedName, before, after fencestate.Key, held bool) step {
		return func(m *Tracker[bool]) { m.Mark(n, m.Generation(), before, after, held) }
	}
	gone := func(n types.NamespacedName) step { return func(m *Tracker[bool]) { m.Gone(n) } }
	tests := map[string]struct {
		steps []step
		want  progress
	}{
		"nothing began: not started": {
			want: progress{},
		},
		"a state with no objects is marked at once": {
			steps: []step{begin(active)},
			want:  progress{Started: true, Key: active},
		},
		"pending until every object listed is marked for the state": {
			steps: []step{begin(fenced, a, b, c), reconcile(a, fenced, fenced, true), reconcile(b, fenced, fenced, true)},
			want:  progress{Started: true, Key: fenced, Pending: 1, Count: 2, Total: 2},
		},
		"all marked": {
			steps: []step{begin(fenced, a, b), reconcile(a, fenced, fenced, true), reconcile(b, fenced, fenced, true)},
			want:  progress{Started: true, Key: fenced, Count: 2, Total: 2},
		},
		"a decision across a transition is no mark for either state": {
			steps: []step{begin(fenced, a), reconcile(a, active, fenced, false)},
			want:  progress{Started: true, Key: fenced, Pending: 1, Total: 1},
		},
		"a decision with a state the tracker has not begun yet is no mark": {
			steps: []step{begin(active, a), reconcile(a, fenced, fenced, true)},
			want:  progress{Started: true, Key: active, Pending: 1, Count: 1, Total: 1},
		},
		"a reconcile that started before a new generation does not count for it": {
			steps: []step{
				begin(active, a),
				func(m *Tracker[bool]) {
					gen := m.Generation()
					m.Begin(active, []types.NamespacedName{a})
					m.Mark(a, gen, active, active, false)
				},
			},
			want: progress{Started: true, Key: active, Pending: 1, Total: 1},
		},
		"a new state makes every object pending again": {
			steps: []step{begin(active, a, b), reconcile(a, active, active, false), reconcile(b, active, active, false), begin(fenced, a, b)},
			want:  progress{Started: true, Key: fenced, Pending: 2, Total: 2},
		},
		"a gone object is neither pending nor counted": {
			steps: []step{begin(fenced, a, b), reconcile(a, fenced, fenced, true), reconcile(b, fenced, fenced, true), gone(b)},
			want:  progress{Started: true, Key: fenced, Count: 1, Total: 1},
		},
		"an object created after the state began is counted, not waited for": {
			steps: []step{begin(active, a), reconcile(a, active, active, false), reconcile(c, active, active, true)},
			want:  progress{Started: true, Key: active, Count: 1, Total: 2},
		},
		"a changed mark moves the count both ways": {
			steps: []step{begin(fenced, a, b), reconcile(a, fenced, fenced, true), reconcile(b, fenced, fenced, true), reconcile(a, fenced, fenced, false), reconcile(a, fenced, fenced, false)},
			want:  progress{Started: true, Key: fenced, Count: 1, Total: 2},
		},
		"gone twice counts down once": {
			steps: []step{begin(fenced, a, b), reconcile(a, fenced, fenced, true), reconcile(b, fenced, fenced, true), gone(a), gone(a)},
			want:  progress{Started: true, Key: fenced, Count: 1, Total: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := New(held)
			for _, s := range tc.steps {
				s(m)
			}
			if got := progressOf(m); got != tc.want {
				t.Errorf("progress = %+v, want %+v", got, tc.want)
			}
			if got := m.Count(); got != tc.want.Count {
				t.Errorf("Count() = %d, want %d", got, tc.want.Count)
			}
		})
	}
}

// TestTrackerWithoutCount: a tracker given no count counts nothing.
func TestTrackerWithoutCount(t *testing.T) {
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	k := fencestate.Key{Status: fencestate.Fenced}
	m := New[bool](nil)
	m.Begin(k, []types.NamespacedName{a})
	m.Mark(a, m.Generation(), k, k, true)
	if got := progressOf(m); got != (progress{Started: true, Key: k, Total: 1}) {
		t.Errorf("progress = %+v, want one mark, none counted", got)
	}
}

// TestTrackerSignal: every change of the marks signals, without blocking,
// and a mark or a Gone that changes nothing does not.
func TestTrackerSignal(t *testing.T) {
	a, b := types.NamespacedName{Namespace: "ns", Name: "a"}, types.NamespacedName{Namespace: "ns", Name: "b"}
	k := fencestate.Key{Status: fencestate.Active}
	m := New(held)
	drained := func() bool {
		select {
		case <-m.Changes():
			return true
		default:
			return false
		}
	}
	m.Begin(k, []types.NamespacedName{a})
	m.Begin(k, []types.NamespacedName{a}) // coalesces, never blocks
	if !drained() || drained() {
		t.Fatal("Begin must signal once, coalescing")
	}
	m.Mark(a, m.Generation(), k, k, false)
	if !drained() {
		t.Error("the last pending mark must signal")
	}
	m.Mark(a, m.Generation(), k, k, false)
	if drained() {
		t.Error("a mark that changes nothing must not signal")
	}
	if m.Gone(b) || drained() {
		t.Error("Gone of an object never tracked must report and signal nothing")
	}
	if !m.Gone(a) || !drained() {
		t.Error("Gone of a marked object must report it and signal")
	}
}

// BenchmarkMark marks each of 10,000 objects for a new fence state, held,
// as a transition's re-marking does, and reads the held count after each
// mark, as the Component controller publishes it as a metric.
func BenchmarkMark(b *testing.B) {
	const n = 10000
	names := make([]types.NamespacedName, n)
	for i := range names {
		names[i] = types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("comp-%05d", i)}
	}
	keys := []fencestate.Key{{Status: fencestate.Active, Token: 1}, {Status: fencestate.Fenced, Token: 2}}
	m := New(held)
	m.Begin(keys[0], names)
	for i, name := range names {
		m.Mark(name, m.Generation(), keys[0], keys[0], i%2 == 0)
	}
	i := 0
	for b.Loop() {
		if i%n == 0 {
			m.Begin(keys[i/n%2], names)
		}
		k := keys[i/n%2]
		m.Mark(names[i%n], m.Generation(), k, k, k.Status == fencestate.Fenced)
		_ = m.Count()
		i++
	}
}
