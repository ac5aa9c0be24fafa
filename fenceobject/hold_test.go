package fenceobject

import (
	"context"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/cluster"
)

// TestHoldFollowsTheFenceState: on a real API server, an instance's Lease
// publishes the token and validity of an active state, again once half of
// the published validity has passed and the agent's moved on, and nothing
// once the state is not active or the agent withdrew the hold before a
// release.
func TestHoldFollowsTheFenceState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "fenceobject-hold"})
	start := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	active := func(token uint64, validFor time.Duration) fencestate.State {
		return fencestate.State{Status: fencestate.Active, Token: token, ValidUntilNS: clk.Now().Add(validFor).UnixNano()}
	}
	state := active(42, 9*time.Second)
	k := testKeeper(t, cp.Client, "payments", "a", clk, &state, &recordingAgent{})
	i := testInstance(k)
	published := func() (membership.Hold, bool) {
		t.Helper()
		var l coordinationv1.Lease
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fencegate-payments-a"}, &l); err != nil {
			t.Fatal(err)
		}
		return membership.HoldOf(&l)
	}
	steps := []struct {
		name string
		// do changes the state or the clock before the instance publishes.
		do       func()
		want     time.Time // the published end; zero for no hold
		withdraw bool
	}{
		{"active: the token and the end are published", func() {}, start.Add(9 * time.Second), false},
		{"a heartbeat before half-way writes nothing", func() {
			clk.Step(2 * time.Second)
			state = active(42, 9*time.Second)
		}, start.Add(9 * time.Second), false},
		{"half-way, the renewed end is published", func() {
			clk.Step(3 * time.Second)
			state = active(42, 9*time.Second)
		}, start.Add(14 * time.Second), false},
		{"a new token is published at once", func() { state = active(43, 9*time.Second) }, start.Add(14 * time.Second), false},
		{"the agent withdraws the hold before it releases", func() {}, time.Time{}, true},
		{"fenced: nothing", func() { state = fencestate.State{Status: fencestate.Fenced, Token: 44} }, time.Time{}, false},
	}
	for _, step := range steps {
		step.do()
		if step.withdraw {
			if err := k.WithdrawHold(ctx); err != nil {
				t.Fatalf("%s: %v", step.name, err)
			}
		} else {
			i.publishHold(ctx)
		}
		got, ok := published()
		if ok != !step.want.IsZero() || !got.ValidUntil.Equal(step.want) {
			t.Errorf("%s: published %+v (%t), want the end %v", step.name, got, ok, step.want)
		}
	}
}
