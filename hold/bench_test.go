package hold_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
)

// BenchmarkHoldTransition measures, on a real API server, how long the
// hold controller takes after a fence transition until every one of 1,000
// CronJobs is held (its hold patched and seen: decided quiet) and until
// every one is released: with fencegate run's default client limit (200
// queries a second), and with none (--kube-api-qps=-1, as the chart runs
// it beside its FlowSchema). -short holds 100.
func BenchmarkHoldTransition(b *testing.B) {
	for _, limit := range []struct {
		name string
		qps  float32
	}{{"client-limit=200qps", 200}, {"no-client-limit", -1}} {
		b.Run(limit.name, func(b *testing.B) { benchmarkHoldTransition(b, limit.qps) })
	}
}

func benchmarkHoldTransition(b *testing.B, qps float32) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	h := startWith(b, active, time.Millisecond, qps)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return h.cp.Client.Create(gctx, cronJob(fmt.Sprintf("job-%04d", i), ptr.To(false))) })
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	h.waitAllDecided(b, ctx, active, n, 0)

	var held, released []time.Duration
	for b.Loop() {
		start := time.Now()
		h.transition(b, fenced)
		h.waitAllDecided(b, ctx, fenced, n, n)
		held = append(held, time.Since(start))
		start = time.Now()
		h.transition(b, active)
		h.waitAllDecided(b, ctx, active, n, 0)
		released = append(released, time.Since(start))
	}
	slices.Sort(held)
	slices.Sort(released)
	b.ReportMetric(quantile(held, 0.5).Seconds(), "s-held-p50")
	b.ReportMetric(quantile(held, 0.99).Seconds(), "s-held-p99")
	b.ReportMetric(quantile(released, 0.99).Seconds(), "s-released-p99")
}

// waitAllDecided waits until every one of n CronJobs is decided for the
// state s, with quiet of them held and quiet: a hold is counted quiet only
// once the controller saw the object its patch made.
func (h *harness) waitAllDecided(b *testing.B, ctx context.Context, s fencestate.State, n, quiet int) {
	b.Helper()
	var last hold.Progress
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		last = h.holder.Progress("default")
		if len(last.Kinds) != 1 {
			return false, nil
		}
		k := last.Kinds[0]
		return k.Key == s.Key() && k.Pending == 0 && k.Total == n && k.Held == quiet && k.Quiet == quiet, nil
	})
	if err != nil {
		b.Fatalf("waiting for %d CronJobs decided for %s: %v; progress %+v", n, s.Status, err, last)
	}
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}
