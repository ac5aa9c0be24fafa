package fencestate_test

import (
	"testing"

	"github.com/fencegate/fencegate/fencestate"
)

// TestFollow: a followed Source reads through its read function each time
// and subscribes through its subscribe function, one channel per call.
func TestFollow(t *testing.T) {
	state := fencestate.State{Status: fencestate.Fenced}
	var channels []chan struct{}
	src := fencestate.Follow(
		func() (fencestate.State, bool) { return state, true },
		func() <-chan struct{} { ch := make(chan struct{}, 1); channels = append(channels, ch); return ch },
	)
	state.Status = fencestate.Active
	if got, ok := src.Fence(); !ok || got.Status != fencestate.Active {
		t.Errorf("Fence() = %s, %t; want the state read now (active)", got.Status, ok)
	}
	a, b := src.Subscribe(), src.Subscribe()
	if len(channels) != 2 || a == b {
		t.Fatalf("two subscriptions made %d channels", len(channels))
	}
	channels[1] <- struct{}{}
	select {
	case <-b:
	default:
		t.Error("the second subscriber did not hear its signal")
	}
}
