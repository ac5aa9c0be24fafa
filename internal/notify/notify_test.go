package notify_test

import (
	"testing"

	"github.com/fencegate/fencegate/internal/notify"
)

// signalled reports whether ch holds a signal, taking it.
func signalled(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestBroadcast(t *testing.T) {
	var b notify.Broadcast
	b.Signal() // no subscriber yet: heard by none
	a := b.Subscribe()
	if signalled(a) {
		t.Fatal("a subscriber heard a signal sent before it subscribed")
	}
	c := b.Subscribe()
	for round := range 3 {
		b.Signal()
		if !signalled(a) || !signalled(c) {
			t.Fatalf("round %d: every subscriber must hear the signal", round)
		}
	}
	// A subscriber that does not read holds one pending signal and never
	// blocks the others.
	for round := range 3 {
		b.Signal()
		if !signalled(a) {
			t.Fatalf("round %d: a reading subscriber must hear each signal", round)
		}
	}
	if !signalled(c) {
		t.Error("a subscriber that did not read must hold one signal")
	}
	if signalled(c) {
		t.Error("signals to a subscriber that did not read must coalesce into one")
	}
}

func TestSignalNeverBlocks(t *testing.T) {
	ch := notify.New()
	notify.Signal(ch)
	notify.Signal(ch) // would block on a full channel
	if !signalled(ch) || signalled(ch) {
		t.Error("two signals before a read must coalesce into one")
	}
}
