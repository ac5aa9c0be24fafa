package authority_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

// BenchmarkDeclareRenewal measures heartbeats through gRPC against the
// embedded etcd: the holder renewing its lease, one etcd transaction each.
// "sequential" is one cluster waiting for each answer; "parallel" is one
// cluster per goroutine, each in its own domain.
func BenchmarkDeclareRenewal(b *testing.B) {
	srv := authoritytest.Start(b, authoritytest.Options{LeaseTTL: time.Minute})
	client := srv.Client(b)
	ctx := context.Background()

	b.Run("sequential", func(b *testing.B) {
		req := &fencev1.DeclareClusterEpochRequest{Domain: "seq", ClusterName: "east", ClusterUid: "uid-east", Epoch: 1}
		if _, err := client.DeclareClusterEpoch(ctx, req); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for b.Loop() {
			if _, err := client.DeclareClusterEpoch(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "declarations/s")
	})

	b.Run("parallel", func(b *testing.B) {
		next := make(chan int, 1024)
		for i := range cap(next) {
			next <- i
		}
		b.RunParallel(func(pb *testing.PB) {
			req := &fencev1.DeclareClusterEpochRequest{Domain: fmt.Sprintf("par-%d", <-next), ClusterName: "east", ClusterUid: "uid-east", Epoch: 1}
			for pb.Next() {
				if _, err := client.DeclareClusterEpoch(ctx, req); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "declarations/s")
	})
}

// BenchmarkTakeoverToWatchEvent measures how fast a takeover reaches a
// watcher: from sending the declaration that is granted (after the holder
// released) to a WatchFence stream delivering the HOLDER_CHANGED event.
func BenchmarkTakeoverToWatchEvent(b *testing.B) {
	srv := authoritytest.Start(b, authoritytest.Options{LeaseTTL: time.Minute})
	client := srv.Client(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watch, err := client.WatchFence(ctx, &fencev1.WatchFenceRequest{})
	if err != nil {
		b.Fatal(err)
	}
	var latencies []time.Duration
	seen := func(want fencev1.FenceEventType, sent time.Time) {
		ev, err := watch.Recv()
		if err != nil {
			b.Fatal(err)
		}
		if ev.GetType() != want {
			b.Fatalf("event %s, want %s", ev.GetType(), want)
		}
		if want == fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED {
			latencies = append(latencies, time.Since(sent))
		}
	}
	seen(fencev1.FenceEventType_FENCE_EVENT_TYPE_SNAPSHOT, time.Now())
	h := &handover{clusters: [2]string{"east", "west"}, client: func(string) fencev1.FenceServiceClient { return client }}
	h.begin(ctx, b, seen)
	latencies = latencies[:0]
	for b.Loop() {
		h.next(ctx, b, seen)
	}
	slices.Sort(latencies)
	var total time.Duration
	for _, l := range latencies {
		total += l
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(len(latencies)), "ns/takeover-event")
	b.ReportMetric(float64(latencies[len(latencies)*99/100].Nanoseconds()), "p99-ns/takeover-event")
}

// handover hands a domain's fence back and forth between two clusters as a
// failover does, and lets its caller wait after each step for the watch
// event the step makes.
type handover struct {
	domain   string
	clusters [2]string
	// client returns the client a cluster calls with.
	client func(cluster string) fencev1.FenceServiceClient
	// holder indexes the cluster that holds the fence, at epoch.
	holder int
	epoch  uint64
}

// begin makes the first cluster the holder, at epoch 1; seen is then called
// with the event that makes and when its call was sent.
func (h *handover) begin(ctx context.Context, tb testing.TB, seen func(fencev1.FenceEventType, time.Time)) {
	tb.Helper()
	h.holder, h.epoch = 0, 1
	sent := time.Now()
	if _, err := h.client(h.clusters[0]).DeclareClusterEpoch(ctx, declareReq(h.domain, h.clusters[0], 1)); err != nil {
		tb.Fatal(err)
	}
	seen(fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED, sent)
}

// next hands the fence to the other cluster: it declares the next epoch
// and is told FENCE_ACQUIRING, the holder releases, and it declares again
// and is granted. After each step seen is called with the event the step
// makes and when its call was sent.
func (h *handover) next(ctx context.Context, tb testing.TB, seen func(fencev1.FenceEventType, time.Time)) {
	tb.Helper()
	holder, taker := h.clusters[h.holder], h.clusters[1-h.holder]
	sent := time.Now()
	if _, err := h.client(taker).DeclareClusterEpoch(ctx, declareReq(h.domain, taker, h.epoch+1)); errorInfo(err).GetReason() != rpctypes.ReasonAcquiring {
		tb.Fatalf("%s declares %d: %v, want %s", taker, h.epoch+1, err, rpctypes.ReasonAcquiring)
	}
	seen(fencev1.FenceEventType_FENCE_EVENT_TYPE_PENDING_CHANGED, sent)
	release := releaseReq(h.domain, holder, h.epoch)
	release.ClusterName = holder
	sent = time.Now()
	if _, err := h.client(holder).ReleaseFence(ctx, release); err != nil {
		tb.Fatal(err)
	}
	seen(fencev1.FenceEventType_FENCE_EVENT_TYPE_RELEASED, sent)
	h.epoch++
	sent = time.Now()
	if _, err := h.client(taker).DeclareClusterEpoch(ctx, declareReq(h.domain, taker, h.epoch)); err != nil {
		tb.Fatal(err)
	}
	seen(fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED, sent)
	h.holder = 1 - h.holder
}

// BenchmarkDeclareAuthorization measures renewals over mTLS with and
// without an authorization file: what checking every call's identity
// against its role costs.
func BenchmarkDeclareAuthorization(b *testing.B) {
	for _, mode := range []struct {
		name string
		// file is the authorization file; empty means none.
		file string
	}{{"off", ""}, {"on", authorizationFile}} {
		b.Run(mode.name, func(b *testing.B) {
			s := startMTLS(b, authoritytest.Options{LeaseTTL: time.Minute, Quiet: true}, mode.file)
			client := s.clients[eastID]
			ctx := context.Background()
			req := &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1}
			if _, err := client.DeclareClusterEpoch(ctx, req); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := client.DeclareClusterEpoch(ctx, req); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "declarations/s")
		})
	}
}

// BenchmarkFenceHistory measures GetFenceHistory of a domain that keeps
// 1,000 events (the default limit), read whole.
func BenchmarkFenceHistory(b *testing.B) {
	srv := authoritytest.Start(b, authoritytest.Options{LeaseTTL: time.Minute})
	client := srv.Client(b)
	ctx := context.Background()
	declare := &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1, Instance: "a"}
	release := &fencev1.ReleaseFenceRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1, Instance: "a"}
	for range 1000 {
		if _, err := client.DeclareClusterEpoch(ctx, declare); err != nil {
			b.Fatal(err)
		}
		if _, err := client.ReleaseFence(ctx, release); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		resp, err := client.GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{})
		if err != nil {
			b.Fatal(err)
		}
		if n := len(resp.GetEvents()); n != 1000 {
			b.Fatalf("%d events, want the 1000 kept", n)
		}
	}
}
