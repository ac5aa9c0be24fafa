package gate_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// noop is a reconciler that does nothing: what the gate adds to a
// reconcile is all that is measured.
type noop struct{}

func (noop) Reconcile(context.Context, reconcile.Request) (reconcile.Result, error) {
	return reconcile.Result{}, nil
}

// reading is the floor of a gated reconcile: the read of its object from
// the manager's cache, which the gate makes for the reconciler's domain.
type reading struct{ c client.Client }

func (r reading) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var c fencegatev1alpha1.Component
	return reconcile.Result{}, r.c.Get(ctx, req.NamespacedName, &c)
}

// BenchmarkGate is what the gate costs on the cached path, on a real API
// server: the hold of a domain (Hold), and a gated reconcile of a cached
// object against the bare read of that object, the floor it adds to.
func BenchmarkGate(b *testing.B) {
	var gated reconcile.Reconciler
	l := newLab(b, func(l *lab) { gated = l.gate.Reconciler(&fencegatev1alpha1.Component{}, noop{}) })
	l.fence("default", "active", 42)
	l.lease("default", "a", 42, l.clock.Now().Add(time.Hour))
	l.await("default", holding(42), "held")
	if err := l.cp.Client.Create(l.ctx, component("billing", "default")); err != nil {
		b.Fatal(err)
	}
	req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "billing"}}
	floor := reading{l.mgr.GetClient()}
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := floor.Reconcile(ctx, req)
		return err == nil, nil
	}); err != nil {
		b.Fatal("the manager's cache never held the Component")
	}
	b.Run("hold", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !l.gate.Hold(l.ctx, "default").Holding {
				b.Fatal("not holding")
			}
		}
	})
	for name, r := range map[string]reconcile.Reconciler{"reconcile/floor": floor, "reconcile/gated": gated} {
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Reconcile(l.ctx, req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkTransitionReachesEveryReconcile is the time from a transition
// (fencegate writes the Fence of a domain fenced) to the cancellation of
// each of 1,000 gated reconciles in flight, through a real API server and
// the manager's informer: p50, p99 and the last, in milliseconds, over
// every reconcile of every transition.
func BenchmarkTransitionReachesEveryReconcile(b *testing.B) {
	const inflight = 1000
	inner := &blocking{}
	var gated reconcile.Reconciler
	l := newLab(b, func(l *lab) { gated = l.gate.Reconciler(&fencegatev1alpha1.Component{}, inner) })
	var latencies []time.Duration
	token := int64(42)
	for b.Loop() {
		token += 2
		l.fence("default", "active", token)
		l.lease("default", "a", token, l.clock.Now().Add(time.Hour))
		l.await("default", holding(token), "held")
		inner.reset(inflight)
		var done sync.WaitGroup
		for i := range inflight {
			done.Go(func() {
				req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("c-%d", i)}}
				if _, err := gated.Reconcile(l.ctx, req); err != nil {
					b.Error(err)
				}
			})
		}
		inner.started.Wait()
		written := time.Now()
		l.fence("default", "fenced", token+1)
		done.Wait()
		for _, end := range inner.ended {
			latencies = append(latencies, end.Sub(written))
		}
	}
	slices.Sort(latencies)
	at := func(q float64) float64 {
		return float64(latencies[int(q*float64(len(latencies)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.5), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
	b.ReportMetric(at(1), "max-ms")
}

// blocking is a reconciler that waits for its context to end, and records
// when it did.
type blocking struct {
	started sync.WaitGroup
	mu      sync.Mutex
	ended   []time.Time
}

// reset expects n reconciles.
func (r *blocking) reset(n int) {
	r.ended = r.ended[:0]
	r.started.Add(n)
}

func (r *blocking) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	r.started.Done()
	<-ctx.Done()
	now := time.Now()
	r.mu.Lock()
	r.ended = append(r.ended, now)
	r.mu.Unlock()
	return reconcile.Result{}, nil
}
