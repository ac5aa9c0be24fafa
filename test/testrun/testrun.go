// Package testrun runs what a test starts in the background (a manager, an
// engine's hot reload, a webhook server) until the test ends.
package testrun

import (
	"context"
	"testing"
)

// Start runs start in its own goroutine until the test ends (or ctx does):
// at cleanup it cancels start's context, waits for it to return, and fails
// the test, naming what, if it returned an error. The context it returns
// is start's: it ends when the test does.
func Start(tb testing.TB, ctx context.Context, what string, start func(context.Context) error) context.Context {
	tb.Helper()
	ctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- start(ctx) }()
	tb.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			tb.Errorf("%s: %v", what, err)
		}
	})
	return ctx
}
