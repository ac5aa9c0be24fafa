package runnable_test

import (
	"context"
	"errors"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencegate/fencegate/internal/runnable"
)

func TestEveryReplica(t *testing.T) {
	want := errors.New("stopped")
	var r manager.Runnable = runnable.EveryReplica(func(context.Context) error { return want })
	if err := r.Start(context.Background()); !errors.Is(err, want) {
		t.Errorf("Start: %v, want the function's error", err)
	}
	le, ok := r.(manager.LeaderElectionRunnable)
	if !ok || le.NeedLeaderElection() {
		t.Error("EveryReplica must tell the manager it needs no leadership")
	}
}
