package stack

import (
	"context"
	"testing"
)

// StartForTest builds fencegate when opts.Binary is empty, starts the
// stack in a temporary directory when opts.Dir is empty, and stops it when
// the test or benchmark ends, also when it fails to start. It fails tb at
// once if anything does not start.
func StartForTest(tb testing.TB, ctx context.Context, opts Options) *Stack {
	tb.Helper()
	if opts.Binary == "" {
		bin, err := Build(ctx, tb.TempDir())
		if err != nil {
			tb.Fatal(err)
		}
		opts.Binary = bin
	}
	if opts.Dir == "" {
		opts.Dir = tb.TempDir()
	}
	s, err := Start(ctx, opts)
	tb.Cleanup(func() {
		if err := s.Stop(); err != nil {
			tb.Errorf("stop the stack: %v", err)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
