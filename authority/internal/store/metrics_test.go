package store

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// TestHolderLeaseExpiryGauge follows one domain's holder through a grant, a
// renewal, a refused declaration and the release of both its instances: the
// gauge always says until when the domain has a holder.
func TestHolderLeaseExpiryGauge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Unix(1_800_000_000, 0)
	clk := clocktesting.NewFakePassiveClock(start)
	s, err := New(embeddedEtcd(t), Options{LeaseTTL: time.Minute, Clock: clk, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	instance := func(d statemachine.Declaration, i string) statemachine.Declaration { d.Instance = i; return d }
	releaseOf := func(r statemachine.Release, i string) statemachine.Release { r.Instance = i; return r }

	steps := []struct {
		name    string
		advance time.Duration
		apply   func() error
		want    time.Time // the zero time: 0, no holder
	}{
		{"first grant to east/a", 0, func() error { _, err := s.Declare(ctx, "default", instance(decl("east", 1), "a"), Actor{}); return err }, start.Add(time.Minute)},
		{"east/b declares later", 10 * time.Second, func() error { _, err := s.Declare(ctx, "default", instance(decl("east", 1), "b"), Actor{}); return err }, start.Add(70 * time.Second)},
		{"west is refused: nothing moves", 5 * time.Second, func() error { _, err := s.Declare(ctx, "default", decl("west", 1), Actor{}); return err }, start.Add(70 * time.Second)},
		{"east/b releases: east/a's lease still runs", 0, func() error {
			_, _, err := s.Release(ctx, "default", releaseOf(rel("east", 1), "b"), Actor{})
			return err
		}, start.Add(time.Minute)},
		{"east/a releases: no holder", 0, func() error {
			_, _, err := s.Release(ctx, "default", releaseOf(rel("east", 1), "a"), Actor{})
			return err
		}, time.Time{}},
	}
	for _, step := range steps {
		clk.SetTime(clk.Now().Add(step.advance))
		if err := step.apply(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		want := 0.0
		if !step.want.IsZero() {
			want = float64(step.want.Unix())
		}
		if got := testutil.ToFloat64(s.metrics.leaseExpiry.WithLabelValues("default")); got != want {
			t.Errorf("%s: holder lease expiry = %v, want %v", step.name, got, want)
		}
	}
}
