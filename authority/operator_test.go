package authority_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/authority/statemachine"
)

func declareAs(name, instance string, epoch uint64) *fencev1.DeclareClusterEpochRequest {
	r := declareReq("", name, epoch)
	r.Instance = instance
	return r
}

// TestRevokeNeverShortensALease: after a revocation, the revoked instances
// are told CLUSTER_FENCED (REVOKED) and renew no more, but the fence goes to
// the cluster taking over only when their leases end, or when each revoked
// instance released its own lease.
func TestRevokeNeverShortensALease(t *testing.T) {
	tests := map[string]struct {
		// instance, if set, is the one instance revoked.
		instance *string
		// selfRelease has the revoked instances release their own leases.
		selfRelease bool
		// wantGrantAfter is when west is granted, from east's last renewal.
		wantGrantAfter time.Duration
	}{
		"every lease of the cluster, no release: the lease end": {wantGrantAfter: 15 * time.Second},
		"every lease, then each instance releases its own":      {selfRelease: true, wantGrantAfter: time.Second},
		"one instance: the other keeps renewing until told":     {instance: ptr("east-1"), wantGrantAfter: 15 * time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clock := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clock, Quiet: true})
			c := srv.Client(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for _, inst := range []string{"east-1", "east-2"} {
				if _, err := c.DeclareClusterEpoch(ctx, declareAs("east", inst, 3)); err != nil {
					t.Fatal(err)
				}
			}
			resp, err := c.RevokeFence(ctx, &fencev1.RevokeFenceRequest{ClusterName: "east", Instance: tc.instance})
			if err != nil {
				t.Fatal(err)
			}
			if until := resp.GetRevokedUntil().AsTime(); !until.Equal(clock.Now().Add(15 * time.Second)) {
				t.Errorf("revoked until %s, want the lease end %s", until, clock.Now().Add(15*time.Second))
			}
			revoked := []string{"east-1", "east-2"}
			if tc.instance != nil {
				revoked = []string{*tc.instance}
				// The other instance is told once a takeover is pending,
				// as without a revocation.
			}
			clock.Step(time.Second)
			for _, inst := range revoked {
				_, err := c.DeclareClusterEpoch(ctx, declareAs("east", inst, 3))
				info := errorInfo(err)
				if info.GetReason() != rpctypes.ReasonClusterFenced || info.GetMetadata()[rpctypes.MetadataFenceReason] != rpctypes.FenceReasonRevoked ||
					!strings.Contains(status.Convert(err).Message(), "was revoked") {
					t.Fatalf("%s renews after the revocation: %v, want CLUSTER_FENCED (REVOKED)", inst, err)
				}
			}
			// A new pod of a revoked cluster gets no lease either.
			if tc.instance == nil {
				if _, err := c.DeclareClusterEpoch(ctx, declareAs("east", "east-3", 3)); errorInfo(err).GetMetadata()[rpctypes.MetadataFenceReason] != rpctypes.FenceReasonRevoked {
					t.Errorf("a new instance of a revoked cluster: %v, want REVOKED", err)
				}
			}
			if _, err := c.DeclareClusterEpoch(ctx, declareReq("", "west", 4)); errorInfo(err).GetReason() != rpctypes.ReasonAcquiring {
				t.Fatalf("west takes over: %v, want FENCE_ACQUIRING", err)
			}
			if tc.instance != nil {
				// The other instance, told of the takeover, does not
				// renew either; it stays silent, as if partitioned.
				if _, err := c.DeclareClusterEpoch(ctx, declareAs("east", "east-2", 3)); errorInfo(err).GetMetadata()[rpctypes.MetadataFenceReason] != rpctypes.FenceReasonTakeoverPending {
					t.Errorf("east-2 during the takeover: %v, want TAKEOVER_PENDING", err)
				}
			}
			if tc.selfRelease {
				for _, inst := range revoked {
					r := releaseReq("", "east", 3)
					r.Instance, r.ClusterName = inst, "east"
					if _, err := c.ReleaseFence(ctx, r); err != nil {
						t.Fatal(err)
					}
				}
			}
			// Just before the grant is due, west still waits.
			clock.SetTime(time.Unix(1_700_000_000, 0).Add(tc.wantGrantAfter - time.Millisecond))
			if !tc.selfRelease {
				if _, err := c.DeclareClusterEpoch(ctx, declareReq("", "west", 4)); errorInfo(err).GetReason() != rpctypes.ReasonAcquiring {
					t.Fatalf("west at %s: %v, want still FENCE_ACQUIRING: a revocation must not shorten the lease", tc.wantGrantAfter-time.Millisecond, err)
				}
			}
			clock.SetTime(time.Unix(1_700_000_000, 0).Add(tc.wantGrantAfter))
			if _, err := c.DeclareClusterEpoch(ctx, declareReq("", "west", 4)); err != nil {
				t.Fatalf("west once the revoked leases ended: %v", err)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func TestRevokeRefusals(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{Quiet: true})
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.RevokeFence(ctx, &fencev1.RevokeFenceRequest{ClusterName: "east"}); errorInfo(err).GetReason() != rpctypes.ReasonNotHolder ||
		!strings.Contains(status.Convert(err).Message(), "no cluster holds it") {
		t.Errorf("revoke with no holder: %v", err)
	}
	if _, err := c.DeclareClusterEpoch(ctx, declareReq("", "east", 1)); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		req      *fencev1.RevokeFenceRequest
		wantCode codes.Code
		wantSays string
	}{
		"another cluster":       {req: &fencev1.RevokeFenceRequest{ClusterName: "west"}, wantCode: codes.FailedPrecondition, wantSays: `cluster "east" holds it at epoch 1`},
		"a bad name":            {req: &fencev1.RevokeFenceRequest{ClusterName: "West_1"}, wantCode: codes.InvalidArgument, wantSays: "cluster_name"},
		"an instance with none": {req: &fencev1.RevokeFenceRequest{ClusterName: "east", Instance: ptr("gone")}, wantCode: codes.OK},
		"the cluster":           {req: &fencev1.RevokeFenceRequest{ClusterName: "east"}, wantCode: codes.OK},
		"the cluster once more": {req: &fencev1.RevokeFenceRequest{ClusterName: "east"}, wantCode: codes.OK},
		"a bad domain":          {req: &fencev1.RevokeFenceRequest{Domain: "a/b", ClusterName: "east"}, wantCode: codes.InvalidArgument, wantSays: "domain"},
	}
	for _, name := range []string{"another cluster", "a bad name", "an instance with none", "the cluster", "the cluster once more", "a bad domain"} {
		tc := tests[name]
		_, err := c.RevokeFence(ctx, tc.req)
		if st := status.Convert(err); st.Code() != tc.wantCode || !strings.Contains(st.Message(), tc.wantSays) {
			t.Errorf("%s: %v, want %s saying %q", name, err, tc.wantCode, tc.wantSays)
		}
	}
	// A revoked cluster takes the fence back by declaring a higher epoch.
	if _, err := c.DeclareClusterEpoch(ctx, declareReq("", "east", 1)); errorInfo(err).GetMetadata()[rpctypes.MetadataFenceReason] != rpctypes.FenceReasonRevoked {
		t.Fatalf("east at the revoked epoch: %v", err)
	}
	resp, err := c.DeclareClusterEpoch(ctx, declareReq("", "east", 2))
	if err != nil || resp.GetHolder().GetRevoked() {
		t.Fatalf("east at a higher epoch: %v, revoked %v; want the fence back", err, resp.GetHolder().GetRevoked())
	}
}

// TestEpochGuard: an epoch further above the domain's highest than
// --max-epoch-step is refused and not recorded, so that it cannot raise the
// bar for the real clusters; forgetting the cluster that set the highest
// epoch lowers it.
func TestEpochGuard(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{MaxEpochStep: 10, Quiet: true})
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	steps := []struct {
		req        *fencev1.DeclareClusterEpochRequest
		wantReason string
	}{
		{declareReq("", "east", 10), ""},
		{declareReq("", "rogue", 18446744073709551615), rpctypes.ReasonEpochStepTooLarge},
		{declareReq("", "west", 21), rpctypes.ReasonEpochStepTooLarge},
		{declareReq("", "west", 20), rpctypes.ReasonAcquiring},
		{declareReq("", "north", 31), rpctypes.ReasonEpochStepTooLarge},
		{declareReq("", "north", 30), rpctypes.ReasonAcquiring},
	}
	for i, s := range steps {
		_, err := c.DeclareClusterEpoch(ctx, s.req)
		if got := errorInfo(err).GetReason(); got != s.wantReason {
			t.Fatalf("step %d, %s at %d: %v, want %q", i, s.req.GetClusterName(), s.req.GetEpoch(), err, s.wantReason)
		}
		if s.wantReason != rpctypes.ReasonEpochStepTooLarge {
			continue
		}
		md := errorInfo(err).GetMetadata()
		if status.Code(err) != codes.FailedPrecondition || md[rpctypes.MetadataMaxEpochStep] != "10" || md[rpctypes.MetadataHighestEpoch] == "" ||
			!strings.Contains(status.Convert(err).Message(), "nothing was recorded") {
			t.Errorf("step %d: %v (metadata %v), want FailedPrecondition naming the highest epoch and the limit", i, err, md)
		}
	}
	fence, err := c.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range fence.GetFence().GetClusters() {
		if rec.GetClusterName() == "rogue" || rec.GetHighestEpoch() > 30 {
			t.Errorf("a refused declaration was recorded: %v", rec)
		}
	}
}

func TestForgetCluster(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{MaxEpochStep: 10, Quiet: true})
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range []*fencev1.DeclareClusterEpochRequest{declareReq("", "east", 1), declareReq("", "west", 2), declareReq("", "typo", 11)} {
		_, _ = c.DeclareClusterEpoch(ctx, r)
	}
	forget := func(name, uid string) error {
		_, err := c.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{ClusterName: name, ClusterUid: uid})
		return err
	}
	tests := []struct {
		name, uid  string
		wantCode   codes.Code
		wantReason string
		wantSays   string
	}{
		{"east", "uid-east", codes.FailedPrecondition, rpctypes.ReasonClusterInUse, "holds the fence"},
		{"typo", "uid-typo", codes.FailedPrecondition, rpctypes.ReasonClusterInUse, "is taking the fence over"},
		{"west", "uid-west", codes.OK, "", ""},
		{"west", "uid-west", codes.NotFound, "", "no cluster with uid uid-west declared"},
		{"wrong", "uid-east", codes.NotFound, "", `recorded as cluster "east", not "wrong"`},
		{"", "uid-east", codes.InvalidArgument, "", "cluster_name"},
	}
	for _, tc := range tests {
		err := forget(tc.name, tc.uid)
		st := status.Convert(err)
		if st.Code() != tc.wantCode || errorInfo(err).GetReason() != tc.wantReason || !strings.Contains(st.Message(), tc.wantSays) {
			t.Errorf("forget %s/%s: %v, want %s %s saying %q", tc.name, tc.uid, err, tc.wantCode, tc.wantReason, tc.wantSays)
		}
	}
	// West, forgotten, may declare below the epoch it once did.
	if _, err := c.DeclareClusterEpoch(ctx, declareReq("", "west", 1)); errorInfo(err).GetReason() != rpctypes.ReasonClusterFenced {
		t.Errorf("west at a lower epoch once forgotten: %v, want fenced, not regressed", err)
	}
}

// TestHistory: every change of the fence and every operator action is
// recorded in the transaction that makes it, oldest first, bounded by the
// history limit; since and limit select.
func TestHistory(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	const limit = statemachine.MaxHistoryPerChange
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clock, HistoryLimit: limit, Quiet: true})
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	step := func(d time.Duration, call func() error) {
		t.Helper()
		clock.Step(d)
		_ = call()
	}
	declare := func(name, inst string, epoch uint64) func() error {
		return func() error { _, err := c.DeclareClusterEpoch(ctx, declareAs(name, inst, epoch)); return err }
	}
	step(0, declare("east", "e1", 1)) // granted (first)
	// More entries than the limit keeps: an instance that declares and
	// releases, again and again.
	for range limit {
		step(0, declare("east", "filler", 1))
		step(0, func() error {
			r := releaseReq("", "east", 1)
			r.Instance = "filler"
			_, err := c.ReleaseFence(ctx, r)
			return err
		})
	}
	step(time.Second, declare("east", "e2", 1))
	step(time.Second, declare("west", "w1", 2)) // pending
	step(time.Second, func() error {            // e1 releases
		r := releaseReq("", "east", 1)
		r.Instance = "e1"
		_, err := c.ReleaseFence(ctx, r)
		return err
	})
	step(20*time.Second, declare("west", "w1", 2)) // e2's lease ended: expired, then granted after expiry
	step(time.Second, func() error {
		_, err := c.RevokeFence(ctx, &fencev1.RevokeFenceRequest{ClusterName: "west"})
		return err
	})
	step(time.Second, func() error {
		_, err := c.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{ClusterName: "east", ClusterUid: "uid-east"})
		return err
	})

	all, err := c.GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(all.GetEvents()); n != limit {
		t.Fatalf("%d history entries kept, want the limit %d", n, limit)
	}
	events := all.GetEvents()[limit-6:]
	var got []string
	for _, ev := range events {
		got = append(got, strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "FENCE_HISTORY_EVENT_TYPE_"))+" "+ev.GetClusterName()+" "+ev.GetInstance())
	}
	// The newest six are the changes after the filler's.
	want := []string{"pending west ", "released east e1", "lease_expired east e2", "granted west w1", "revoked west ", "forgotten east "}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("history\n  %s\nwant\n  %s", strings.Join(got, "; "), strings.Join(want, "; "))
	}
	grant := events[3]
	fence, err := c.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if grant.GetToken() != fence.GetFence().GetHolder().GetToken() || grant.GetGrant() != "after_expiry" || grant.GetPrevious().GetClusterName() != "east" {
		t.Errorf("grant %v: want west's token %d, after_expiry, from east", grant, fence.GetFence().GetHolder().GetToken())
	}
	if expired := events[2]; !expired.GetTime().AsTime().Equal(time.Unix(1_700_000_001, 0).Add(15 * time.Second)) {
		t.Errorf("e2's lease expired at %s, want when it ended", expired.GetTime().AsTime())
	}
	if a := grant.GetActor(); a.GetMethod() != fencev1.FenceService_DeclareClusterEpoch_FullMethodName || a.GetPeer() == "" {
		t.Errorf("grant's actor %v", a)
	}

	since, err := c.GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{Since: events[4].GetTime()})
	if err != nil || len(since.GetEvents()) != 2 {
		t.Errorf("since the revocation: %v, %v; want 2 events", since.GetEvents(), err)
	}
	last, err := c.GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{Limit: 1})
	if err != nil || len(last.GetEvents()) != 1 || last.GetEvents()[0].GetType() != fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_FORGOTTEN {
		t.Errorf("the newest one: %v, %v", last.GetEvents(), err)
	}
}
