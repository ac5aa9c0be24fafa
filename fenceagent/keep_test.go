package fenceagent

import (
	"context"
	"strings"
	"testing"
	"time"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

func TestKeepsLease(t *testing.T) {
	tests := map[string]struct {
		age, interval, ttl, margin time.Duration
		want                       bool
	}{
		"a new lease, declaring every second":                         {age: 0, interval: time.Second, ttl: 15 * time.Second, margin: 2 * time.Second, want: true},
		"two thirds of the usable part left at the next":              {age: 3*time.Second + time.Second/3, interval: time.Second, ttl: 15 * time.Second, margin: 2 * time.Second, want: true},
		"less than two thirds left at the next":                       {age: 3*time.Second + time.Second/2, interval: time.Second, ttl: 15 * time.Second, margin: 2 * time.Second, want: false},
		"a watch event just after a renewal, at the default interval": {age: 0, interval: 13 * time.Second / 3, ttl: 15 * time.Second, margin: 2 * time.Second, want: true},
		"the default interval, one heartbeat on":                      {age: 4 * time.Second, interval: 13 * time.Second / 3, ttl: 15 * time.Second, margin: 2 * time.Second, want: false},
		"the default declare interval of 5 s":                         {age: 0, interval: 5 * time.Second, ttl: 15 * time.Second, margin: 2 * time.Second, want: false},
		"a lease no longer than the margin":                           {age: 0, interval: time.Millisecond, ttl: 2 * time.Second, margin: 2 * time.Second, want: false},
		"a lease from the future (a clock stepped back)":              {age: -time.Second, interval: time.Second, ttl: 15 * time.Second, margin: 2 * time.Second, want: false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := KeepsLease(tc.age, tc.interval, tc.ttl, tc.margin); got != tc.want {
				t.Errorf("KeepsLease(%v, %v, %v, %v) = %v, want %v", tc.age, tc.interval, tc.ttl, tc.margin, got, tc.want)
			}
		})
	}
}

// TestHolderKeepsItsLeaseWhileMostOfItIsLeft: a holder that declares more
// often than it must asks for its lease to be kept, counts a kept lease
// from the send of the declaration that got it, asks for a renewal once
// less than two thirds of it would be left at the next declaration, and
// does not act on a lease it cannot count.
func TestHolderKeepsItsLeaseWhileMostOfItIsLeft(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, func(o *Options) { o.DeclareInterval, o.DeclareTimeout = time.Second, 500*time.Millisecond })
	ta.startManual(t)
	ctx := context.Background()
	// declare sends one declaration, answers it with the lease of the
	// declaration leaseOf picks, and returns the request.
	declare := func(leaseOf func(req *fencev1.DeclareClusterEpochRequest) uint64) (*fencev1.DeclareClusterEpochRequest, outcome) {
		t.Helper()
		done := make(chan outcome, 1)
		go func() { done <- ta.declare(ctx) }()
		c := auth.next(t)
		if c.req.GetDeclarationId() == 0 {
			t.Fatal("a declaration without a declaration_id")
		}
		resp, _ := grantResp(c.req, testLease, 3)
		resp.LeaseDeclarationId = leaseOf(c.req)
		c.answer(resp, nil)
		return c.req, <-done
	}
	own := func(req *fencev1.DeclareClusterEpochRequest) uint64 { return req.GetDeclarationId() }
	kept := func(req *fencev1.DeclareClusterEpochRequest) uint64 { return req.GetKeepLeaseOf() }
	usable := testLease - testMargin

	start := ta.clock.Now()
	first, _ := declare(own)
	if first.GetKeepLeaseOf() != 0 {
		t.Fatalf("the first declaration asks to keep the lease of %d", first.GetKeepLeaseOf())
	}
	if got, want := ta.Status().ValidUntilNS, start.Add(usable).UnixNano(); got != want {
		t.Fatalf("valid until %d, want %d", got, want)
	}

	ta.clock.Step(2 * time.Second)
	second, _ := declare(kept)
	if second.GetKeepLeaseOf() != first.GetDeclarationId() || second.GetDeclarationId() == first.GetDeclarationId() {
		t.Fatalf("second declaration: id %d, keeps %d; want a new id that keeps %d", second.GetDeclarationId(), second.GetKeepLeaseOf(), first.GetDeclarationId())
	}
	st := ta.Status()
	if st.Status != fencestate.Active || st.ValidUntilNS != start.Add(usable).UnixNano() || st.LastSuccessNS != ta.clock.Now().UnixNano() {
		t.Fatalf("after the kept lease: %+v; want active until the first send + %v, last success now", st, usable)
	}

	// 4 s + the 1 s interval is more than a third of the usable 13 s.
	ta.clock.Step(2 * time.Second)
	renewal, _ := declare(own)
	if renewal.GetKeepLeaseOf() != 0 {
		t.Fatalf("a declaration 4 s into the lease asks to keep it (of %d)", renewal.GetKeepLeaseOf())
	}
	if got, want := ta.Status().ValidUntilNS, ta.clock.Now().Add(usable).UnixNano(); got != want {
		t.Fatalf("after the renewal: valid until %d, want %d", got, want)
	}

	_, o := declare(func(*fencev1.DeclareClusterEpochRequest) uint64 { return 12345 })
	if o.err == nil || !strings.Contains(o.err.Error(), "neither this declaration") {
		t.Fatalf("an answer with another declaration's lease: err %v", o.err)
	}
	if st := ta.Status(); st.Status != fencestate.Unknown || st.Reason != fencestate.ReasonUnexpectedError {
		t.Fatalf("after a lease it cannot count: %s (%s), want unknown (%s)", st.Status, st.Reason, fencestate.ReasonUnexpectedError)
	}
	if next, _ := declare(own); next.GetKeepLeaseOf() != 0 {
		t.Fatalf("the declaration after an uncountable lease asks to keep %d", next.GetKeepLeaseOf())
	}
}
