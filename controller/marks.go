package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/notify"
)

// MarkProgress is how far the controller got in marking the Components for
// the latest fence state it was told of.
type MarkProgress struct {
	// Started is false until the controller began marking for some state
	// (it runs on the leader only).
	Started bool
	// Key is the state the Components are being marked for.
	Key fencestate.Key
	// Pending is how many of the Components that existed when the state
	// began are not marked for it yet; 0 means every one is.
	Pending int
	// Held and Total count the Components by their last marks.
	Held, Total int
}

// Marks tracks, for the latest fence state, which Components the controller
// has still to re-mark, and how many Components are held. The controller
// begins a generation on every fence transition with the Components it
// enqueues; a reconcile counts for the generation it started in and only
// when it decided with that generation's state, so that a reconcile that
// ran across a transition never passes for a re-mark of the new state.
type Marks struct {
	mu      sync.Mutex
	started bool
	gen     uint64
	key     fencestate.Key
	pending map[types.NamespacedName]struct{}
	// held holds every Component the controller marked, and whether it is
	// held.
	held    map[types.NamespacedName]bool
	changes chan struct{}
}

// NewMarks returns an empty tracker.
func NewMarks() *Marks {
	return &Marks{
		pending: map[types.NamespacedName]struct{}{},
		held:    map[types.NamespacedName]bool{},
		changes: notify.New(),
	}
}

// Changes signals (coalescing, never blocking) every change of Progress.
func (m *Marks) Changes() <-chan struct{} { return m.changes }

// Progress returns where the marking stands.
func (m *Marks) Progress() MarkProgress {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.progress()
}

func (m *Marks) progress() MarkProgress {
	p := MarkProgress{Started: m.started, Key: m.key, Pending: len(m.pending), Total: len(m.held)}
	for _, held := range m.held {
		if held {
			p.Held++
		}
	}
	return p
}

// begin starts a generation for the state key: every one of names must be
// marked for it.
func (m *Marks) begin(key fencestate.Key, names []types.NamespacedName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.started, m.key = true, key
	m.gen++
	m.pending = make(map[types.NamespacedName]struct{}, len(names))
	for _, n := range names {
		m.pending[n] = struct{}{}
	}
	m.signal()
}

// generation is the generation a reconcile starts in.
func (m *Marks) generation() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.gen
}

// marked records that a reconcile that started in generation gen marked a
// Component, held or not, and returns the held count. The fence state was
// before when the reconcile began to decide and after once it had decided:
// it counts as a mark for the generation's state only when both are that
// state, since the decision then read that state and no other.
func (m *Marks) marked(name types.NamespacedName, gen uint64, before, after fencestate.Key, held bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	was := m.progress()
	m.held[name] = held
	if gen == m.gen && before == m.key && after == m.key {
		delete(m.pending, name)
	}
	now := m.progress()
	if now != was {
		m.signal()
	}
	return now.Held
}

// tracks reports whether the Component has a mark or is still to be
// marked here.
func (m *Marks) tracks(name types.NamespacedName) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	_, held := m.held[name]
	_, pending := m.pending[name]
	return held || pending
}

// gone records that a Component no longer needs marks (deleted, or being
// deleted), and returns the held count.
func (m *Marks) gone(name types.NamespacedName) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	before := m.progress()
	delete(m.held, name)
	delete(m.pending, name)
	after := m.progress()
	if after != before {
		m.signal()
	}
	return after.Held
}

// signal tells the Changes reader to look again.
func (m *Marks) signal() { notify.Signal(m.changes) }
