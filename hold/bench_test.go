package hold_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/testrun"
)

// BenchmarkHoldTransition measures, on a real API server, how long the
// hold controller takes after a fence transition until every one of 1,000
// CronJobs is held (s-applied: every hold patch accepted; s-held: every
// held object also seen quiet) and until every one is released: with
// fencegate run's default client limit (200 queries a second), and with
// none (--kube-api-qps=-1, as the chart runs it beside its FlowSchema).
// Each is set against its floor, measured first on the same API server: a
// bare client that sends the same patches to the same objects with as many
// at once as the controller's workers, and decides nothing. -short holds
// 100.
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
	h := newHarness(b, active, time.Millisecond)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error { return h.cp.Client.Create(gctx, cronJob(fmt.Sprintf("job-%04d", i), ptr.To(false))) })
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	floor := h.patchFloor(b, ctx, qps, 3)
	testrun.Start(b, ctx, "manager", h.newManager(b, qps).Start)
	h.waitAllDecided(b, ctx, active, n, 0)

	var applied, held, released []time.Duration
	transitions := 0
	for b.Loop() {
		transitions += 2
		start := time.Now()
		h.transition(b, fenced)
		applied = append(applied, h.waitAllDecided(b, ctx, fenced, n, n).Sub(start))
		held = append(held, time.Since(start))
		start = time.Now()
		h.transition(b, active)
		h.waitAllDecided(b, ctx, active, n, 0)
		released = append(released, time.Since(start))
	}
	// Each transition patches each object once: none is patched again
	// from a cache that has not caught up with the controller's own patch.
	if patches, failures := h.counter(b, "fencegate_hold_actions_total"), h.counter(b, "fencegate_hold_failures_total"); patches != float64(transitions*n) || failures != 0 {
		b.Fatalf("%d transitions of %d CronJobs: %v patches and %v failed ones, want %d and none", transitions, n, patches, failures, transitions*n)
	}
	for _, d := range [][]time.Duration{applied, held, released} {
		slices.Sort(d)
	}
	b.ReportMetric(quantile(floor, 0.99).Seconds(), "s-floor-p99")
	b.ReportMetric(quantile(applied, 0.99).Seconds(), "s-applied-p99")
	b.ReportMetric(quantile(held, 0.5).Seconds(), "s-held-p50")
	b.ReportMetric(quantile(held, 0.99).Seconds(), "s-held-p99")
	b.ReportMetric(quantile(released, 0.99).Seconds(), "s-released-p99")
	b.ReportMetric(quantile(held, 0.99).Seconds()/quantile(floor, 0.99).Seconds(), "held/floor")
}

// patchFloor holds and releases every CronJob rounds times as a bare
// client would, with fencegate's field manager and patches of the shape
// the controller sends (the resourceVersion tested, the record annotation
// and spec.suspend set or removed), as many at once as the controller's
// workers and limited as its client is (qps). It returns each pass's time,
// sorted.
func (h *harness) patchFloor(b *testing.B, ctx context.Context, qps float32, rounds int) []time.Duration {
	b.Helper()
	c, err := client.New(h.restConfig(qps), client.Options{Scheme: h.cp.Scheme})
	if err != nil {
		b.Fatal(err)
	}
	var list batchv1.CronJobList
	if err := c.List(ctx, &list, client.InNamespace("default")); err != nil {
		b.Fatal(err)
	}
	versions := make([]string, len(list.Items))
	for i := range list.Items {
		versions[i] = list.Items[i].ResourceVersion
	}
	record, err := json.Marshal(hold.Record{Fields: []hold.RecordedField{{Path: []string{"spec", "suspend"}, Value: json.RawMessage("true"), Prior: json.RawMessage("false")}}})
	if err != nil {
		b.Fatal(err)
	}
	patches := map[bool][]hold.Op{
		true:  {{Op: "add", Path: "/metadata/annotations", Value: map[string]string{hold.RecordAnnotation: string(record)}}, {Op: "replace", Path: "/spec/suspend", Value: true}},
		false: {{Op: "remove", Path: "/metadata/annotations"}, {Op: "replace", Path: "/spec/suspend", Value: false}},
	}
	var passes []time.Duration
	for range rounds {
		for _, holding := range []bool{true, false} {
			start := time.Now()
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(hold.DefaultMaxConcurrentReconciles)
			for i := range list.Items {
				g.Go(func() error {
					ops := append([]hold.Op{{Op: "test", Path: "/metadata/resourceVersion", Value: versions[i]}}, patches[holding]...)
					patch, err := json.Marshal(ops)
					if err != nil {
						return err
					}
					obj := &batchv1.CronJob{}
					obj.Namespace, obj.Name = "default", list.Items[i].Name
					if err := c.Patch(gctx, obj, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(hold.FieldManager)); err != nil {
						return err
					}
					versions[i] = obj.ResourceVersion
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			passes = append(passes, time.Since(start))
		}
	}
	slices.Sort(passes)
	return passes
}

// waitAllDecided waits until every one of n CronJobs is decided for the
// state s, with quiet of them held and quiet: a hold is counted quiet only
// once the controller saw the object its patch made. It returns when the
// last of them was first seen decided, before it was seen quiet.
func (h *harness) waitAllDecided(b *testing.B, ctx context.Context, s fencestate.State, n, quiet int) (applied time.Time) {
	b.Helper()
	var last hold.Progress
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		last = h.holder.Progress("default")
		if len(last.Kinds) != 1 {
			return false, nil
		}
		k := last.Kinds[0]
		decided := k.Key == s.Key() && k.Pending == 0 && k.Total == n && k.Held == quiet
		if decided && applied.IsZero() {
			applied = time.Now()
		}
		return decided && k.Quiet == quiet, nil
	})
	if err != nil {
		b.Fatalf("waiting for %d CronJobs decided for %s: %v; progress %+v", n, s.Status, err, last)
	}
	return applied
}

// counter sums the hold controller's counter name over its labels.
func (h *harness) counter(b testing.TB, name string) float64 {
	b.Helper()
	families, err := h.metrics.Gather()
	if err != nil {
		b.Fatal(err)
	}
	sum := 0.0
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}
