package stack

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/proc"
)

// StartForTest builds fencegate when opts.Binary is empty, starts the
// stack in a temporary directory when opts.Dir is empty, and stops it when
// the test or benchmark ends, also when it fails to start. It fails tb at
// once if anything does not start. Under -short, or without the control
// plane's binaries, it skips tb before it builds anything
// (cluster.RequireControlPlane).
func StartForTest(tb testing.TB, ctx context.Context, opts Options) *Stack {
	tb.Helper()
	cluster.RequireControlPlane(tb)
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
		if tb.Failed() {
			s.logTails(tb)
		}
		if err := s.Stop(); err != nil {
			tb.Errorf("stop the stack: %v", err)
		}
	})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// failedTestLogLines is how much of each process's log a failed test
// prints.
const failedTestLogLines = 40

// logTails prints the end of the authority's and every fencegate's log.
func (s *Stack) logTails(tb testing.TB) {
	tb.Helper()
	if s == nil {
		return
	}
	procs := []*proc.Process{s.Authority}
	for _, c := range s.Clusters {
		for _, r := range c.Replicas {
			procs = append(procs, r.Run)
		}
	}
	for _, p := range procs {
		if p != nil {
			tb.Logf("the last %d lines of %s:\n%s", failedTestLogLines, p.LogPath, p.Tail(failedTestLogLines))
		}
	}
}

// TokenForTest is the fencing token of domain d's Fence on c; it fails tb
// if the Fence cannot be read.
func (c *Cluster) TokenForTest(tb testing.TB, ctx context.Context, d string) int64 {
	tb.Helper()
	var f fencegatev1alpha1.Fence
	if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: d}, &f); err != nil {
		tb.Fatal(err)
	}
	return f.Status.Token
}
