package enginetest

import (
	"context"
	"testing"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/notify"
)

// Switch is a real engine with the shipped policies, serving the default
// domain, whose fence state a test sets as the agent would: Set writes it
// and signals the change to whoever follows Source.
type Switch struct {
	Engine *engine.Engine
	signal notify.Broadcast
}

// NewSwitch returns a Switch holding initial.
func NewSwitch(t testing.TB, initial fencestate.State) *Switch {
	t.Helper()
	e, err := engine.New(engine.Options{Domains: []string{initial.Domain}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Switch{Engine: e}
	s.Set(t, initial)
	return s
}

// Set writes state and signals it.
func (s *Switch) Set(t testing.TB, state fencestate.State) {
	t.Helper()
	if err := s.Engine.WriteFence(context.Background(), state); err != nil {
		t.Fatal(err)
	}
	s.signal.Signal()
}

// Source is the state of domain d as the policies see it, with Set's
// signals.
func (s *Switch) Source(d string) fencestate.Source {
	return fencestate.Follow(func() (fencestate.State, bool) { return s.Engine.Fence(d) }, s.signal.Subscribe)
}
