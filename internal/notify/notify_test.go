package notify_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/notify"
)

func TestFanout(t *testing.T) {
	src := notify.New()
	f := notify.NewFanout(src)
	// b is signalled before a: once a heard a signal, b has been sent it.
	b := f.Subscribe()
	a := f.Subscribe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Start(ctx) }()

	wait := func(name string, ch <-chan struct{}) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("subscriber %s never heard the signal", name)
		}
	}
	for range 3 {
		notify.Signal(src)
		wait("a", a)
		wait("b", b)
	}
	// A subscriber that does not read holds one pending signal and never
	// blocks the others.
	for range 3 {
		notify.Signal(src)
		wait("a", a)
	}
	wait("b", b)
	select {
	case <-b:
		t.Error("signals to a subscriber that did not read must coalesce into one")
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start returned %v", err)
	}
}
