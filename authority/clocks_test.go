package authority_test

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

// TestNoReplicaClockEndsALeaseEarly: replicas of one authority whose wall
// clocks are set apart, or stepped, still judge a lease to last its whole
// TTL from when each first saw it, on its own monotonic clock. A replica
// whose wall clock runs 20 s ahead, past the lease's stored end, does not
// grant a standby the fence while the holder's lease runs; nor does a
// forward step of its wall clock.
func TestNoReplicaClockEndsALeaseEarly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 15 * time.Second
	start := time.Unix(1_700_000_000, 0)
	wall := clocktesting.NewFakeClock(start)
	// Every replica's monotonic clock runs as the real time would: the
	// test moves them together, and their walls apart.
	var mono time.Duration
	monotonic := func() time.Duration { return mono }
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: ttl, Clock: wall, Monotonic: monotonic, Quiet: true})
	ahead := clocktesting.NewFakeClock(start.Add(20 * time.Second))
	replica := srv.AddReplica(t, authoritytest.ReplicaOptions{Clock: ahead, Monotonic: monotonic})
	first, second := srv.Client(t), (&authoritytest.Server{Addr: replica.Addr}).Client(t)

	if _, err := first.DeclareClusterEpoch(ctx, declareReq("", "east", 1)); err != nil {
		t.Fatal(err)
	}
	_, err := second.DeclareClusterEpoch(ctx, declareReq("", "west", 2))
	if reason := errorInfo(err).GetReason(); reason != rpctypes.ReasonAcquiring {
		t.Fatalf("west through the replica 20 s ahead, as east's lease began: %v, want %s", err, rpctypes.ReasonAcquiring)
	}
	// The replica's wall clock steps a minute forward; 10 s pass.
	ahead.Step(time.Minute)
	wall.Step(10 * time.Second)
	mono += 10 * time.Second
	if _, err := second.DeclareClusterEpoch(ctx, declareReq("", "west", 2)); errorInfo(err).GetReason() != rpctypes.ReasonAcquiring {
		t.Fatalf("west through the replica stepped a minute ahead, 10 s into east's lease: %v, want %s", err, rpctypes.ReasonAcquiring)
	}
	// Once the whole TTL passed since the replica first saw the lease, it
	// has ended by every replica's judgement.
	mono += ttl
	wall.Step(ttl)
	if _, err := second.DeclareClusterEpoch(ctx, declareReq("", "west", 2)); err != nil {
		t.Fatalf("west once east's lease ended: %v", err)
	}
}
