package authority_test

import (
	"context"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

// TestHolderCarriesItsGrantKind: every answer that names the holder (the
// declare answer of the grant and of each renewal, GetFence, read back
// from etcd) says how the holder was granted the fence and when, so that a
// holder granted after the previous one's lease expired (it may have been
// cut off, acting until its lease ran out by its own clock) knows it.
func TestHolderCarriesItsGrantKind(t *testing.T) {
	// One step per call; a step with wantGrant "" is a refusal.
	type step struct {
		advance   time.Duration
		cluster   string
		epoch     uint64
		release   bool
		wantGrant string
		// granted marks the step that moved the fence: the holder's
		// acquire_time is the authority's time of that call.
		granted bool
	}
	tests := map[string][]step{
		"first, renewed": {
			{cluster: "east", epoch: 1, wantGrant: "first", granted: true},
			{advance: time.Second, cluster: "east", epoch: 1, wantGrant: "first"},
			{advance: time.Second, cluster: "east", epoch: 2, wantGrant: "first"},
		},
		"after a release, renewed": {
			{cluster: "east", epoch: 1, wantGrant: "first", granted: true},
			{advance: time.Second, cluster: "west", epoch: 2},
			{cluster: "east", epoch: 1, release: true},
			{advance: time.Second, cluster: "west", epoch: 2, wantGrant: "after_release", granted: true},
			{advance: time.Second, cluster: "west", epoch: 2, wantGrant: "after_release"},
		},
		"after an expiry, renewed": {
			{cluster: "east", epoch: 1, wantGrant: "first", granted: true},
			{advance: time.Second, cluster: "west", epoch: 2},
			{advance: 14 * time.Second, cluster: "west", epoch: 2, wantGrant: "after_expiry", granted: true},
			{advance: time.Second, cluster: "west", epoch: 2, wantGrant: "after_expiry"},
		},
	}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			clock := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
			client := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clock, Quiet: true}).Client(t)
			var acquired time.Time
			for i, st := range steps {
				clock.Step(st.advance)
				if st.release {
					if _, err := client.ReleaseFence(ctx, releaseReq("", st.cluster, st.epoch)); err != nil {
						t.Fatalf("step %d: release: %v", i, err)
					}
					continue
				}
				resp, err := client.DeclareClusterEpoch(ctx, declareReq("", st.cluster, st.epoch))
				if st.wantGrant == "" {
					if err == nil {
						t.Fatalf("step %d: %s at epoch %d was answered %v, want a refusal", i, st.cluster, st.epoch, resp)
					}
					continue
				}
				if err != nil {
					t.Fatalf("step %d: declare: %v", i, err)
				}
				if st.granted {
					acquired = clock.Now()
				}
				fence, err := client.GetFence(ctx, &fencev1.GetFenceRequest{})
				if err != nil {
					t.Fatalf("step %d: get fence: %v", i, err)
				}
				for source, h := range map[string]*fencev1.Holder{"declare answer": resp.GetHolder(), "GetFence": fence.GetFence().GetHolder()} {
					if h.GetClusterName() != st.cluster || h.GetGrant() != st.wantGrant || !h.GetAcquireTime().AsTime().Equal(acquired) {
						t.Errorf("step %d: %s holder %s granted %q at %v, want %s granted %q at %v",
							i, source, h.GetClusterName(), h.GetGrant(), h.GetAcquireTime().AsTime(), st.cluster, st.wantGrant, acquired)
					}
				}
			}
		})
	}
}
