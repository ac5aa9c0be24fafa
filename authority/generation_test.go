package authority_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
)

// TestRestoredCopyIsToldClusterRestored: the authority moves a declaring
// cluster's generation on every period; an instance that presents one the
// authority moved past twice (a copy of the cluster restored from a
// backup) is told CLUSTER_RESTORED and nothing is recorded, while the
// cluster's current instances go on. Raising the copy's epoch, an
// operator's failover to it, is accepted whatever it presents, once the
// leases of the cluster's instances have ended.
func TestRestoredCopyIsToldClusterRestored(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := clocktesting.NewFakeClock(time.Unix(1_700_000_000, 0))
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 15 * time.Second, Clock: clock, ClusterGenerationPeriod: 10 * time.Second, Quiet: true})
	c := srv.Client(t)
	declare := func(instance string, epoch, generation uint64) (*fencev1.DeclareClusterEpochResponse, error) {
		req := declareReq("", "east", epoch)
		req.Instance, req.ClusterGeneration = instance, generation
		return c.DeclareClusterEpoch(ctx, req)
	}

	resp, err := declare("east-a", 1, 0)
	if err != nil || resp.GetClusterGeneration() == 0 {
		t.Fatalf("first declaration: %v, %v; want a generation", resp, err)
	}
	backup := resp.GetClusterGeneration()
	current := backup
	for range 2 {
		clock.Step(10 * time.Second)
		resp, err := declare("east-a", 1, current)
		if err != nil || resp.GetClusterGeneration() == current {
			t.Fatalf("declaration a period later: %v, %v; want a new generation after %d", resp, err, current)
		}
		current = resp.GetClusterGeneration()
	}

	_, err = declare("east-restored", 1, backup)
	info := errorInfo(err)
	if status.Code(err) != codes.FailedPrecondition || info.GetReason() != rpctypes.ReasonClusterRestored ||
		info.GetMetadata()[rpctypes.MetadataPresentedGeneration] != strconv.FormatUint(backup, 10) || !strings.Contains(status.Convert(err).Message(), "fencegate failover --to east") {
		t.Fatalf("the copy presenting the backup's generation: %v (%v), want %s saying how to fail over to it", err, info.GetMetadata(), rpctypes.ReasonClusterRestored)
	}
	if _, leaked := info.GetMetadata()[rpctypes.MetadataClusterGeneration]; leaked {
		t.Errorf("the refusal tells the copy the current generation: %v", info.GetMetadata())
	}
	fence, err := c.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h := fence.GetFence().GetHolder(); len(h.GetInstances()) != 1 || h.GetInstances()[0].GetInstance() != "east-a" {
		t.Fatalf("the refused copy got a lease: %v", h.GetInstances())
	}
	if _, err := declare("east-b", 1, current); err != nil {
		t.Fatalf("a current instance of east beside the copy: %v", err)
	}
	// The copy at a raised epoch, an operator's failover to it, takes the
	// fence over as another cluster would: once the leases of east's
	// instances, which may be the original's, have ended.
	_, err = declare("east-restored", 2, backup)
	if info := errorInfo(err); status.Code(err) != codes.FailedPrecondition || info.GetReason() != rpctypes.ReasonAcquiring {
		t.Fatalf("the copy at a raised epoch beside east's running leases: %v, want %s", err, rpctypes.ReasonAcquiring)
	}
	clock.Step(16 * time.Second)
	if resp, err := declare("east-restored", 2, backup); err != nil || resp.GetClusterGeneration() == 0 {
		t.Fatalf("the copy at a raised epoch once east's leases ended: %v, %v; want granted", resp, err)
	}
}
