package controller

import (
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
// whether the Component is held; the tracker counts the held ones.
type Marks struct {
	t *marks.Tracker[bool]
}

// NewMarks returns an empty tracker.
func NewMarks() *Marks { return &Marks{t: marks.New(func(held bool) bool { return held })} }

// Changes signals (coalescing, never blocking) every change of Progress.
func (m *Marks) Changes() <-chan struct{} { return m.t.Changes() }

// Progress returns where the marking stands.
func (m *Marks) Progress() MarkProgress {
	var p MarkProgress
	m.t.Read(func(v marks.View[bool]) {
		p = MarkProgress{Started: v.Started, Key: v.Key, Pending: v.Pending, Held: v.Counted, Total: len(v.Values)}
	})
	return p
}
