package authority_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

func TestRestartKeepsHolderPendingAndHighestEpochs(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: time.Minute})
	client := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	granted, err := client.DeclareClusterEpoch(ctx, declareReq("", "east", 5))
	if err != nil {
		t.Fatalf("east declares: %v", err)
	}
	for _, c := range []struct {
		name   string
		epoch  uint64
		reason string
	}{
		{"west", 7, rpctypes.ReasonAcquiring},
		{"north", 4, rpctypes.ReasonClusterFenced},
		{"north", 3, rpctypes.ReasonEpochRegressed},
	} {
		_, err := client.DeclareClusterEpoch(ctx, declareReq("", c.name, c.epoch))
		if info := errorInfo(err); info.GetReason() != c.reason {
			t.Fatalf("%s declares %d: %v, want %s", c.name, c.epoch, err, c.reason)
		}
	}
	before, err := client.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	watch, err := client.WatchFence(ctx, &fencev1.WatchFenceRequest{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("watch snapshot: %v", err)
	}

	srv.Restart(t)

	if _, err := watch.Recv(); status.Code(err) != codes.Unavailable {
		t.Errorf("watch across the restart: %v, want Unavailable", err)
	}
	after, err := client.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if diff := cmp.Diff(before.GetFence().String(), after.GetFence().String()); diff != "" {
		t.Errorf("fence changed across the restart (-before +after):\n%s", diff)
	}
	if h := after.GetFence().GetHolder(); h.GetClusterName() != "east" || h.GetToken() != granted.GetToken() {
		t.Errorf("holder after restart %v, want east with token %d", h, granted.GetToken())
	}

	// The stored state still decides: north's highest epoch, west's
	// pending takeover, and the token order survived.
	steps := []struct {
		req    *fencev1.DeclareClusterEpochRequest
		reason string
	}{
		{declareReq("", "north", 3), rpctypes.ReasonEpochRegressed},
		{declareReq("", "east", 5), rpctypes.ReasonClusterFenced},
	}
	for _, s := range steps {
		_, err := client.DeclareClusterEpoch(ctx, s.req)
		if info := errorInfo(err); info.GetReason() != s.reason {
			t.Errorf("%s declares %d after restart: %v, want %s", s.req.GetClusterName(), s.req.GetEpoch(), err, s.reason)
		}
	}
	if _, err := client.ReleaseFence(ctx, releaseReq("", "east", 5)); err != nil {
		t.Fatalf("east releases: %v", err)
	}
	west, err := client.DeclareClusterEpoch(ctx, declareReq("", "west", 7))
	if err != nil {
		t.Fatalf("west takes over: %v", err)
	}
	if west.GetToken() <= granted.GetToken() {
		t.Errorf("token after restart %d, want above %d", west.GetToken(), granted.GetToken())
	}
}
