package authority_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

// TestClusterUIDIsBoundToItsName: the identity bound to east may declare
// only as east, but nothing in the authorization file says which UID east
// has; the authority binds each UID to the name it first declared. East
// declaring west's UID (which GetFence shows), far above west's epoch, is
// refused, and nothing of west's record changes: west keeps the fence,
// releases it, and can still be forgotten by its own name.
func TestClusterUIDIsBoundToItsName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := startSecured(t, authoritytest.Options{LeaseTTL: 15 * time.Second})
	east, west, oncall := s.clients[eastID], s.clients[westID], s.clients[oncallID]
	if _, err := west.DeclareClusterEpoch(ctx, declareReq("", "west", 3)); err != nil {
		t.Fatal(err)
	}
	before, err := oncall.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}

	forged := &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-west", Epoch: 1003}
	_, err = east.DeclareClusterEpoch(ctx, forged)
	info := errorInfo(err)
	if status.Code(err) != codes.PermissionDenied || info.GetReason() != rpctypes.ReasonPermissionDenied || info.GetMetadata()[rpctypes.MetadataBoundCluster] != "west" {
		t.Fatalf("east declaring west's uid: %v (%v), want PermissionDenied naming the bound cluster west", err, info.GetMetadata())
	}
	after, err := oncall.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := after.GetFence().GetClusters(), before.GetFence().GetClusters(); len(got) != len(want) || got[0].GetClusterName() != "west" || got[0].GetHighestEpoch() != 3 {
		t.Fatalf("the cluster records changed under a refused declaration: %v, were %v", got, want)
	}

	// West is unaffected: it renews, releases, and can be forgotten.
	if _, err := west.DeclareClusterEpoch(ctx, declareReq("", "west", 3)); err != nil {
		t.Fatalf("west renews after the forged declaration: %v", err)
	}
	release := releaseReq("", "west", 3)
	release.ClusterName = "west"
	if _, err := west.ReleaseFence(ctx, release); err != nil {
		t.Fatalf("west releases: %v", err)
	}
	s.clock.Step(time.Minute)
	if _, err := east.DeclareClusterEpoch(ctx, declareReq("", "east", 4)); err != nil {
		t.Fatalf("east takes over with its own uid: %v", err)
	}
	if _, err := oncall.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{ClusterName: "west", ClusterUid: "uid-west"}); err != nil {
		t.Fatalf("forget west by its own name: %v", err)
	}
}
