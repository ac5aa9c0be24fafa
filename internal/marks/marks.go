// Package marks tracks, per fence domain, how far a controller got in
// deciding every object of its kind for the latest fence state: a
// controller begins a generation on every fence transition with the objects
// it enqueues, and a reconcile counts for that generation only when it
// started in it and decided with its state, so that a reconcile that ran
// across a transition never passes for one of the new state. Each object
// keeps the value of its last mark (whether it is held, whether it is
// quiet), which the controller sums up for the Fence's status.
//
// Kind is the protocol both marking controllers (the Component controller
// and the hold controller) follow in a reconcile: place the object in its
// domain, forget it in every other, note the generation and the fence state,
// decide, read the state again, mark. It is written once so that the
// conditions judged from the marks (Enforced, Quiesced) mean the same.
package marks

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/notify"
)

// Tracker holds one domain's marks; V is what each mark records.
type Tracker[V comparable] struct {
	mu      sync.Mutex
	started bool
	gen     uint64
	key     fencestate.Key
	pending map[types.NamespacedName]struct{}
	values  map[types.NamespacedName]V
	// count says which marks counted sums up (nil: none): the sum is
	// kept as the marks change rather than counted on each read, since a
	// transition re-marks every object and its reader asks after each.
	count   func(V) bool
	counted int
	changes chan struct{}
}

// New returns an empty tracker that counts the marks count says to count
// (nil for none).
func New[V comparable](count func(V) bool) *Tracker[V] { return NewOn(notify.New(), count) }

// NewOn returns an empty tracker that signals its changes on changes (a
// channel of notify.New), which several trackers may share, and counts the
// marks count says to count (nil for none).
func NewOn[V comparable](changes chan struct{}, count func(V) bool) *Tracker[V] {
	return &Tracker[V]{
		pending: map[types.NamespacedName]struct{}{},
		values:  map[types.NamespacedName]V{},
		count:   count,
		changes: changes,
	}
}

// Changes signals (coalescing, never blocking) every change of the marks.
func (t *Tracker[V]) Changes() <-chan struct{} { return t.changes }

// View is a tracker's state at one moment.
type View[V comparable] struct {
	// Started is false until a generation began.
	Started bool
	// Key is the state being marked for.
	Key fencestate.Key
	// Pending is how many objects are still to be marked for Key.
	Pending int
	// Counted is how many marks the tracker's count counts.
	Counted int
	// Values are every object's last mark.
	Values map[types.NamespacedName]V
}

// Read calls read with the tracker's state under its lock; read must not
// keep the view's Values.
func (t *Tracker[V]) Read(read func(View[V])) {
	t.mu.Lock()
	defer t.mu.Unlock()
	read(View[V]{Started: t.started, Key: t.key, Pending: len(t.pending), Counted: t.counted, Values: t.values})
}

// Count is how many marks the tracker's count counts.
func (t *Tracker[V]) Count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.counted
}

// Begin starts a generation for the state key: every one of names must be
// marked for it.
func (t *Tracker[V]) Begin(key fencestate.Key, names []types.NamespacedName) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.started, t.key = true, key
	t.gen++
	t.pending = make(map[types.NamespacedName]struct{}, len(names))
	for _, n := range names {
		t.pending[n] = struct{}{}
	}
	t.signal()
}

// Generation is the generation a reconcile starts in.
func (t *Tracker[V]) Generation() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gen
}

// Mark records that a reconcile that started in generation gen decided
// value for an object. The fence state was before when the reconcile began
// to decide and after once it had decided: it counts as a mark for the
// generation's state only when both are that state, since the decision then
// read that state and no other.
func (t *Tracker[V]) Mark(name types.NamespacedName, gen uint64, before, after fencestate.Key, value V) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, had := t.values[name]
	t.values[name] = value
	changed := !had || old != value
	if changed {
		if had && t.counts(old) {
			t.counted--
		}
		if t.counts(value) {
			t.counted++
		}
	}
	if _, pending := t.pending[name]; pending && gen == t.gen && before == t.key && after == t.key {
		delete(t.pending, name)
		changed = true
	}
	if changed {
		t.signal()
	}
}

// Gone records that an object needs no more marks (deleted, or moved to
// another domain), and reports whether it had a mark or was still to be
// marked.
func (t *Tracker[V]) Gone(name types.NamespacedName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, marked := t.values[name]
	_, pending := t.pending[name]
	if marked && t.counts(last) {
		t.counted--
	}
	delete(t.values, name)
	delete(t.pending, name)
	if marked || pending {
		t.signal()
	}
	return marked || pending
}

// counts reports whether the tracker counts the mark v.
func (t *Tracker[V]) counts(v V) bool { return t.count != nil && t.count(v) }

// Source is a controller source that, when it starts and on each signal of
// changes, reads the fence state with state, lists the objects to mark with
// list, begins a generation for that state with them and enqueues each. The
// state is read before the list: an object created after it is decided
// under this state or a later one. Bursts coalesce twice: changes holds at
// most one pending signal, and the work queue holds each object once. A
// failed list is logged and waits for the next signal.
func (t *Tracker[V]) Source(state func() fencestate.Key, changes <-chan struct{}, list func(context.Context) ([]types.NamespacedName, error), what string) source.Source {
	return source.Func(func(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				key := state()
				if names, err := list(ctx); err != nil {
					if ctx.Err() != nil {
						return
					}
					log.FromContext(ctx).Error(err, "listing failed", "what", what, "effect", "not re-checked until the domain's next fence transition")
				} else {
					t.Begin(key, names)
					for _, n := range names {
						queue.Add(reconcile.Request{NamespacedName: n})
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-changes:
				}
			}
		}()
		return nil
	})
}

// signal tells the Changes reader to look again.
func (t *Tracker[V]) signal() { notify.Signal(t.changes) }
