package fenceagent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/fencestate"
)

// TestClusterGeneration: every declaration presents the newest generation
// the agent knows: the one it starts with, then the newest an accepted
// answer or its Fence gave it, never the one a CLUSTER_RESTORED refusal
// names.
func TestClusterGeneration(t *testing.T) {
	type step struct {
		// adopt are AdoptClusterGeneration calls before the declaration.
		adopt []uint64
		// present is the generation the declaration must present.
		present uint64
		answer  func(*declareCall)
		want    fencestate.Status
		// wantGeneration is State.ClusterGeneration after the answer.
		wantGeneration uint64
		wantReason     string
	}
	grantAt := func(gen uint64) func(*declareCall) {
		return func(c *declareCall) { c.grantAt(testLease, 1, gen) }
	}
	restored := func(presented, current uint64) func(*declareCall) {
		return func(c *declareCall) { c.answer(nil, restoredRefusal(presented, current)) }
	}
	tests := map[string]struct {
		start uint64
		steps []step
	}{
		"the Fence's generation at start, then each answer's": {start: 5, steps: []step{
			{present: 5, answer: grantAt(6), want: fencestate.Active, wantGeneration: 6},
			{present: 6, answer: grantAt(7), want: fencestate.Active, wantGeneration: 7},
		}},
		"none at start; an answer without one keeps the last": {steps: []step{
			{present: 0, answer: grantAt(6), want: fencestate.Active, wantGeneration: 6},
			{present: 6, answer: grantAt(0), want: fencestate.Active, wantGeneration: 6},
		}},
		"an answer older than one already seen does not take it back": {steps: []step{
			{present: 0, answer: grantAt(8), want: fencestate.Active, wantGeneration: 8},
			{present: 8, answer: grantAt(7), want: fencestate.Active, wantGeneration: 8},
		}},
		"a standby adopts the generation of its fenced and acquiring answers": {steps: []step{
			{present: 0, want: fencestate.Fenced, wantGeneration: 4, wantReason: rpctypes.ReasonClusterFenced,
				answer: func(c *declareCall) { c.answer(nil, refusalAt(rpctypes.ReasonClusterFenced, testWest, 7, 0, 4)) }},
			{present: 4, want: fencestate.Acquiring, wantGeneration: 5, wantReason: rpctypes.ReasonAcquiring,
				answer: func(c *declareCall) { c.answer(nil, refusalAt(rpctypes.ReasonAcquiring, testWest, 7, time.Second, 5)) }},
		}},
		"a restored copy does not adopt the generation it is refused with": {start: 5, steps: []step{
			{present: 5, answer: restored(5, 9), want: fencestate.Unknown, wantGeneration: 5, wantReason: rpctypes.ReasonClusterRestored},
			{present: 5, answer: restored(5, 9), want: fencestate.Unknown, wantGeneration: 5, wantReason: rpctypes.ReasonClusterRestored},
		}},
		"an instance cut off catches up through its Fence": {start: 5, steps: []step{
			{present: 5, answer: restored(5, 9), want: fencestate.Unknown, wantGeneration: 5, wantReason: rpctypes.ReasonClusterRestored},
			{adopt: []uint64{9}, present: 9, answer: grantAt(9), want: fencestate.Active, wantGeneration: 9},
		}},
		"the Fence's older generation is not adopted": {start: 9, steps: []step{
			{adopt: []uint64{3, 0}, present: 9, answer: grantAt(9), want: fencestate.Active, wantGeneration: 9},
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, func(o *Options) { o.ClusterGeneration = tc.start })
			if got := ta.Status().ClusterGeneration; got != tc.start {
				t.Errorf("initial state presents generation %d, want %d", got, tc.start)
			}
			ta.startManual(t)
			for i, s := range tc.steps {
				for _, g := range s.adopt {
					ta.AdoptClusterGeneration(g)
				}
				done := make(chan outcome, 1)
				go func() { done <- ta.declare(context.Background()) }()
				c := auth.next(t)
				if got := c.req.GetClusterGeneration(); got != s.present {
					t.Errorf("step %d: the declaration presents generation %d, want %d", i, got, s.present)
				}
				s.answer(c)
				<-done
				got := ta.Status()
				if got.Status != s.want || got.Reason != s.wantReason || got.ClusterGeneration != s.wantGeneration {
					t.Errorf("step %d: %s (%s), generation %d; want %s (%s), generation %d",
						i, got.Status, got.Reason, got.ClusterGeneration, s.want, s.wantReason, s.wantGeneration)
				}
			}
		})
	}
}

// TestClusterRestored: a restored copy is unknown with no validity, says
// what happened and what to do, and declares again at the heartbeat
// interval, not faster.
func TestClusterRestored(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, func(o *Options) { o.ClusterGeneration = 5 })
	ta.start(t)
	auth.next(t).grantAt(testLease, 1, 5)
	ta.waitStatus(t, fencestate.Active)

	ta.stepUntil(t, 100*time.Millisecond, testInterval, "a heartbeat", func() bool { return len(auth.declares) > 0 })
	auth.next(t).answer(nil, restoredRefusal(5, 9))
	s := waitReason(t, ta.ClusterFence, rpctypes.ReasonClusterRestored)
	refusedAt := ta.clock.Now()
	if s.Status != fencestate.Unknown || s.ValidUntilNS != 0 || s.Token != 0 {
		t.Errorf("state = %+v, want unknown without validity or token", s)
	}
	for _, part := range []string{"restored from a backup", "admits nothing", "fencegate failover --to east", "remove"} {
		if !strings.Contains(s.Message, part) {
			t.Errorf("message %q does not contain %q", s.Message, part)
		}
	}

	ta.stepUntil(t, 100*time.Millisecond, testInterval, "a heartbeat", func() bool { return len(auth.declares) > 0 })
	// Within a few steps of the fake clock (the call takes real time to
	// reach the authority): a heartbeat, not a retry after a failure.
	if d := ta.clock.Since(refusedAt); d < testInterval/2 {
		t.Errorf("the next declaration came %s after CLUSTER_RESTORED, want about the heartbeat interval", d)
	}
	c := auth.next(t)
	if got := c.req.GetClusterGeneration(); got != 5 {
		t.Errorf("the next declaration presents generation %d, want 5 still", got)
	}
	c.answer(nil, restoredRefusal(5, 9))
}

// TestAdoptClusterGeneration: calls from many goroutines at once keep the
// highest, write no state, and the next declaration presents it.
func TestAdoptClusterGeneration(t *testing.T) {
	auth, client := newScriptedAuthority(t)
	ta := newTestAgent(t, client, nil)
	ta.startManual(t)
	declare := func(gen uint64) *declareCall {
		done := make(chan outcome, 1)
		go func() { done <- ta.declare(context.Background()) }()
		c := auth.next(t)
		c.grantAt(testLease, 1, gen)
		<-done
		return c
	}
	declare(5)
	before, written := ta.Status(), ta.store.count()
	drain(ta.signals)

	var wg sync.WaitGroup
	for g := range uint64(20) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ta.AdoptClusterGeneration(g)
		}()
	}
	wg.Wait()
	time.Sleep(20 * time.Millisecond)
	if got := ta.store.count(); got != written {
		t.Errorf("AdoptClusterGeneration wrote %d states", got-written)
	}
	if got := ta.Status(); got != before {
		t.Errorf("AdoptClusterGeneration changed the state:\n got %+v\nwant %+v", got, before)
	}

	if got := declare(19).req.GetClusterGeneration(); got != 19 {
		t.Errorf("the next declaration presents generation %d, want 19", got)
	}
	if s := ta.Status(); s.ClusterGeneration != 19 {
		t.Errorf("state presents generation %d, want 19", s.ClusterGeneration)
	}
	// A new generation alone is no transition.
	if signalledNow(ta.signals) {
		t.Error("a change of the cluster generation alone was signalled")
	}
}
