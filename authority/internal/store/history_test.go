package store

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/authority/statemachine"
)

// TestHistoryLimitBelowOneChangeIsRefused: a limit below the most entries
// one change writes would make that change's transaction drop keys it
// writes, which etcd refuses, and every retry would build the same one.
func TestHistoryLimitBelowOneChangeIsRefused(t *testing.T) {
	for _, limit := range []int{-1, 1, statemachine.MaxHistoryPerChange - 1} {
		if _, err := New(nil, Options{LeaseTTL: time.Second, HistoryLimit: limit}); err == nil || !strings.Contains(err.Error(), fmt.Sprint(statemachine.MaxHistoryPerChange)) {
			t.Errorf("history limit %d: %v, want refused naming the least limit %d", limit, err, statemachine.MaxHistoryPerChange)
		}
	}
}

// TestLargestChangeAtTheHistoryLimit: the largest change there is, a
// takeover once every one of the most instances the holder can have let its
// lease run out, commits in one transaction with the least history limit,
// within etcd's bound on the operations of a transaction, and so does the
// next one, which drops the oldest entries.
func TestLargestChangeAtTheHistoryLimit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clk := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	s, err := New(embeddedEtcd(t), Options{LeaseTTL: 15 * time.Second, Clock: clk, HistoryLimit: statemachine.MaxHistoryPerChange})
	if err != nil {
		t.Fatal(err)
	}
	for round, taker := range []string{"west", "east"} {
		holder := map[string]string{"west": "east", "east": "west"}[taker]
		epoch := uint64(2*round + 1)
		for i := range statemachine.MaxInstances {
			d := decl(holder, epoch)
			d.Instance = fmt.Sprintf("%s-%d", holder, i)
			if _, err := s.Declare(ctx, "default", d, Actor{}); err != nil {
				t.Fatalf("round %d: instance %d of %s: %v", round, i, holder, err)
			}
		}
		clk.Step(time.Minute)
		r, err := s.Declare(ctx, "default", decl(taker, epoch+1), Actor{})
		if err != nil || r.Answer.Outcome != statemachine.Granted {
			t.Fatalf("round %d: %s takes over after %d leases ended: %+v, %v", round, taker, statemachine.MaxInstances, r.Answer, err)
		}
		events, err := s.History(ctx, "default", time.Time{}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(events) != statemachine.MaxHistoryPerChange || events[len(events)-1].Kind != statemachine.HistoryGranted {
			t.Fatalf("round %d: %d history entries ending with %v, want the limit %d ending with the grant", round, len(events), events[len(events)-1].Kind, statemachine.MaxHistoryPerChange)
		}
		clk.Step(time.Minute)
	}
}
