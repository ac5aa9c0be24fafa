package controller

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/marks"
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
// has still to re-mark, and how many Components are held (package
// internal/marks: a reconcile counts for the generation it started in and
// only when it decided with that generation's state). Each mark records
// whether the Component is held.
type Marks struct {
	t *marks.Tracker[bool]
	// mu orders every change of the marks with held, how many of them say
	// held: each mark returns that count, and a transition re-marks every
	// Component, so it is kept rather than counted.
	mu   sync.Mutex
	held int
}

// NewMarks returns an empty tracker.
func NewMarks() *Marks { return &Marks{t: marks.New[bool]()} }

// Changes signals (coalescing, never blocking) every change of Progress.
func (m *Marks) Changes() <-chan struct{} { return m.t.Changes() }

// Progress returns where the marking stands.
func (m *Marks) Progress() MarkProgress {
	m.mu.Lock()
	defer m.mu.Unlock()
	var p MarkProgress
	m.t.Read(func(started bool, key fencestate.Key, pending int, held map[types.NamespacedName]bool) {
		p = MarkProgress{Started: started, Key: key, Pending: pending, Held: m.held, Total: len(held)}
	})
	return p
}

// begin starts a generation for the state key: every one of names must be
// marked for it.
func (m *Marks) begin(key fencestate.Key, names []types.NamespacedName) { m.t.Begin(key, names) }

// generation is the generation a reconcile starts in.
func (m *Marks) generation() uint64 { return m.t.Generation() }

// marked records that a reconcile that started in generation gen marked a
// Component, held or not, deciding with the state before → after, and
// returns the held count.
func (m *Marks) marked(name types.NamespacedName, gen uint64, before, after fencestate.Key, held bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.t.Mark(name, gen, before, after, held) {
		m.held--
	}
	if held {
		m.held++
	}
	return m.held
}

// tracks reports whether the Component has a mark or is still to be
// marked here.
func (m *Marks) tracks(name types.NamespacedName) bool { return m.t.Tracks(name) }

// gone records that a Component no longer needs marks (deleted, or being
// deleted), and returns the held count.
func (m *Marks) gone(name types.NamespacedName) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.t.Gone(name) {
		m.held--
	}
	return m.held
}
