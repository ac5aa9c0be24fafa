// Package marks tracks, per fence domain, how far a controller got in
// deciding every object of its kind for the latest fence state: a
// controller begins a generation on every fence transition with the objects
// it enqueues, and a reconcile counts for that generation only when it
// started in it and decided with its state, so that a reconcile that ran
// across a transition never passes for one of the new state. Each object
// keeps the value of its last mark (whether it is held, whether it is
// quiet), which the controller sums up for the Fence's status.
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
	changes chan struct{}
}

// New returns an empty tracker.
func New[V comparable]() *Tracker[V] { return NewOn[V](notify.New()) }

// NewOn returns an empty tracker that signals its changes on changes (a
// channel of notify.New), which several trackers may share.
func NewOn[V comparable](changes chan struct{}) *Tracker[V] {
	return &Tracker[V]{
		pending: map[types.NamespacedName]struct{}{},
		values:  map[types.NamespacedName]V{},
		changes: changes,
	}
}

// Changes signals (coalescing, never blocking) every change of the marks.
func (t *Tracker[V]) Changes() <-chan struct{} { return t.changes }

// Read calls read with the tracker's state under its lock: whether a
// generation began, the state being marked for, how many objects are still
// to be marked for it, and every object's last mark. read must not keep
// values.
func (t *Tracker[V]) Read(read func(started bool, key fencestate.Key, pending int, values map[types.NamespacedName]V)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	read(t.started, t.key, len(t.pending), t.values)
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
// read that state and no other. It returns the object's previous mark
// (the zero value when it had none), so that a caller can keep sums of the
// marks as they change rather than count them all.
func (t *Tracker[V]) Mark(name types.NamespacedName, gen uint64, before, after fencestate.Key, value V) (previous V) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old, had := t.values[name]
	t.values[name] = value
	changed := !had || old != value
	if _, pending := t.pending[name]; pending && gen == t.gen && before == t.key && after == t.key {
		delete(t.pending, name)
		changed = true
	}
	if changed {
		t.signal()
	}
	return old
}

// Tracks reports whether the object has a mark or is still to be marked.
func (t *Tracker[V]) Tracks(name types.NamespacedName) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, marked := t.values[name]
	_, pending := t.pending[name]
	return marked || pending
}

// Gone records that an object needs no more marks (deleted, or moved to
// another domain), and returns its last mark (the zero value when it had
// none).
func (t *Tracker[V]) Gone(name types.NamespacedName) (last V) {
	t.mu.Lock()
	defer t.mu.Unlock()
	last, marked := t.values[name]
	_, pending := t.pending[name]
	delete(t.values, name)
	delete(t.pending, name)
	if marked || pending {
		t.signal()
	}
	return last
}

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
