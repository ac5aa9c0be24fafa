package fenceagent

import (
	"context"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/fencestate"
)

// writerFunc adapts a function to fencestate.Writer.
type writerFunc func(fencestate.State)

func (f writerFunc) WriteFence(_ context.Context, s fencestate.State) error {
	f(s)
	return nil
}

// BenchmarkTakeoverPropagation measures, on a real authority, how long a
// takeover takes to reach a reachable holder: from the standby's declaration
// of a higher epoch to the holder's agent writing "fenced" into its store
// (the authority's etcd transaction and watch event, one declaration by the
// holder, the write). Each iteration is one takeover;
// the two clusters swap roles every time. Run it with -benchtime=50x for the
// p50/p99 over 50 takeovers.
func BenchmarkTakeoverPropagation(b *testing.B) {
	ctx := context.Background()
	srv := authoritytest.Start(b, authoritytest.Options{})
	raw := srv.Client(b)
	clusters := [2]fencestate.Cluster{east, west}
	declare := func(c fencestate.Cluster, epoch uint64) error {
		_, err := raw.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{
			ClusterName: c.Name, ClusterUid: c.UID, Epoch: epoch,
		})
		return err
	}
	// The raw declarations hold a lease of their own (instance ""): once
	// granted, it is released, so that only the agent's lease holds the
	// next takeover back.
	release := func(c fencestate.Cluster, epoch uint64) {
		if _, err := raw.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{ClusterUid: c.UID, Epoch: epoch}); err != nil {
			b.Fatal(err)
		}
	}
	holder, epoch := 0, uint64(1)
	if err := declare(clusters[holder], epoch); err != nil {
		b.Fatal(err)
	}
	release(clusters[holder], epoch)

	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		fenced := make(chan time.Time, 1)
		agent := runAgent(b, srv.Addr, nil, withEpoch(clusters[holder], epoch), func(o *Options) {
			o.DeclareInterval, o.DeclareTimeout = 50*time.Millisecond, 40*time.Millisecond
			o.Writer = writerFunc(func(s fencestate.State) {
				if s.Status == fencestate.Fenced {
					select {
					case fenced <- time.Now():
					default:
					}
				}
			})
		})
		waitStatus(b, agent.ClusterFence, fencestate.Active)
		// A holder has been running for a while: wait for a few
		// heartbeats, so that the watch is open and the authority's etcd
		// watch behind it has caught up (a watch opened while the agent's
		// first declarations are written may deliver its first events
		// only at etcd's next watcher sync, up to 100 ms later).
		eventually(b, "a few heartbeats", func() bool {
			return testutil.ToFloat64(agent.metrics.declarations.WithLabelValues(granted.result())) >= 6
		})
		standby := clusters[1-holder]

		b.StartTimer()
		start := time.Now()
		err := declare(standby, epoch+1)
		at := <-fenced
		b.StopTimer()

		if !isCode(err, codes.FailedPrecondition) {
			b.Fatalf("the raised declaration got %v, want FENCE_ACQUIRING", err)
		}
		latencies = append(latencies, at.Sub(start))
		// The holder releases right after writing: then the standby's
		// next declaration is granted.
		eventually(b, "the standby is granted", func() bool { return declare(standby, epoch+1) == nil })
		release(standby, epoch+1)
		agent.stop()
		holder, epoch = 1-holder, epoch+1
	}
	slices.Sort(latencies)
	// Nearest-rank percentiles, in milliseconds.
	percentile := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(latencies)))) - 1
		return float64(latencies[max(i, 0)].Microseconds()) / 1000
	}
	b.ReportMetric(percentile(0.50), "p50-ms")
	b.ReportMetric(percentile(0.99), "p99-ms")
}
