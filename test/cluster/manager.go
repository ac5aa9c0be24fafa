package cluster

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// RunManagerForTest starts mgr until the test ends (or ctx does), and fails
// the test if it stopped with an error.
func RunManagerForTest(tb testing.TB, ctx context.Context, mgr manager.Manager) {
	tb.Helper()
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	tb.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			tb.Errorf("manager: %v", err)
		}
	})
}
