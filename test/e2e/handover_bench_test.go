package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"
)

// BenchmarkHandover measures how long the fence takes to change hands
// between two real control planes whose fencegate holds CronJobs, with
// 0, 300 and 1,000 CronJobs on each cluster (-short: 0 and 300): a planned
// failover (`fencegate failover --from --wait`), and one after the holder
// was cut off from the authority, run once its lease ended (as
// TestHandoverOrder does both). Each iteration hands the fence to the
// other cluster. It reports, each the median of the iterations, from the
// start of `fencegate failover`:
//   - grant-s: until the authority granted the fence to the new holder;
//   - done-s: until the failover command returned;
//   - first-release-s and all-released-s (with CronJobs): until the new
//     holder's first, and last, CronJob was seen running;
//   - cut-to-first-release-s (cut-off): the same from the cut;
//
// and overlap-ms, the longest time both clusters' CronJobs ran at once in
// any iteration (negative: the shortest gap between the old holder's last
// hold and the new holder's first release). Run it with -benchtime 3x
// (make bench does); it logs each handover on a line.
func BenchmarkHandover(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	sizes := []int{0, 300, 1000}
	if testing.Short() {
		sizes = sizes[:2]
	}
	// The authority's default lease, as a user runs it: a planned
	// handover must hold every CronJob within what is left of it.
	s, watches := startHandoverStack(b, ctx, 0)
	holder, standby := "east", "west"
	created := 0
	for _, n := range sizes {
		createHandoverJobs(b, ctx, s, created, n)
		created = n
		for _, cutOff := range []bool{false, true} {
			name := "planned"
			if cutOff {
				name = "cutoff"
			}
			b.Run(fmt.Sprintf("cronjobs=%d/%s", n, name), func(b *testing.B) {
				settle(b, ctx, s, watches, holder, standby, n)
				var hs []*handover
				for b.Loop() {
					h := handOver(b, ctx, s, watches, holder, standby, n, cutOff)
					hs = append(hs, h)
					holder, standby = standby, holder
				}
				reportHandovers(b, hs)
			})
		}
	}
}

// reportHandovers reports the medians of hs and the worst overlap, and logs
// the slowest handover and every violation of the order.
func reportHandovers(b *testing.B, hs []*handover) {
	b.Helper()
	median := func(d func(*handover) (time.Duration, bool)) (time.Duration, bool) {
		var ds []time.Duration
		for _, h := range hs {
			if v, ok := d(h); ok {
				ds = append(ds, v)
			}
		}
		slices.Sort(ds)
		return percentile(ds, 0.5), len(ds) > 0
	}
	report := func(unit string, d func(*handover) (time.Duration, bool)) {
		if v, ok := median(d); ok {
			b.ReportMetric(v.Seconds(), unit)
		}
	}
	report("grant-s", func(h *handover) (time.Duration, bool) {
		g := h.grant()
		return g.GetTime().AsTime().Sub(h.failoverStart), g != nil
	})
	report("done-s", func(h *handover) (time.Duration, bool) { return h.failoverEnd.Sub(h.failoverStart), true })
	report("first-release-s", func(h *handover) (time.Duration, bool) {
		_, at := extreme(h.released, true)
		return at.Sub(h.failoverStart), len(h.released) > 0
	})
	report("all-released-s", func(h *handover) (time.Duration, bool) {
		_, at := extreme(h.released, false)
		return at.Sub(h.failoverStart), len(h.released) > 0
	})
	report("cut-to-first-release-s", func(h *handover) (time.Duration, bool) {
		_, at := extreme(h.released, true)
		return at.Sub(h.cut), h.cutOff && len(h.released) > 0
	})
	worst, measured := time.Duration(0), false
	for _, h := range hs {
		if d, ok := h.overlap(); ok && (!measured || d > worst) {
			worst, measured = d, true
		}
	}
	if measured {
		b.ReportMetric(float64(worst.Microseconds())/1000, "overlap-ms")
	}
	b.ReportMetric(0, "ns/op")

	// One line per handover: a benchmark's log is cut after ten lines.
	for _, h := range hs {
		b.Log(h.summary())
	}
	for _, h := range hs {
		for _, v := range h.violations() {
			// The benchmark measures the handover as it is; the order is
			// TestHandoverOrder's to enforce.
			b.Logf("%s → %s: %s", h.from, h.to, v)
		}
	}
}
