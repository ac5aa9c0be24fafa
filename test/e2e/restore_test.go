package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/test/stack"
)

// generationPeriod is how often the authority of TestRestoredClusterAdmitsNothing
// moves a cluster's generation on: short, so that a backup is two
// generations old within seconds.
const generationPeriod = 2 * time.Second

// TestRestoredClusterAdmitsNothing: a control plane restored from an etcd
// snapshot of the holder (`etcdutl snapshot restore`), started beside the
// running holder, has the holder's name, kube-system UID, epoch and
// certificate. Its fencegate presents the cluster generation its restored
// Fence status kept, which the authority has moved past: it is told
// CLUSTER_RESTORED and admits nothing, while the holder goes on admitting.
// Failing over to the copy (raising its epoch) then works, and the original
// is fenced as regressed.
func TestRestoredClusterAdmitsNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Two control planes and their fencegates share the machine: a lease
	// of 6 s (valid 4 s past each declaration, less the agent's margin)
	// keeps a slow heartbeat from ending east's.
	s := stack.StartForTest(t, ctx, stack.Options{
		Clusters:       []stack.ClusterSpec{{Name: "east", Epoch: 1}},
		LeaseTTL:       6 * time.Second,
		InstanceLease:  3 * time.Second,
		MTLS:           true,
		AuthorityFlags: []string{"--cluster-generation-period", generationPeriod.String()},
		Say:            t.Logf,
	})
	east := s.Cluster("east")
	backedUp := waitFence(t, ctx, east, "east holds the fence and keeps its generation", 30*time.Second, func(f *fencegatev1alpha1.Fence) bool {
		return is(holdingEnforced, 1, 1)(f) && f.Status.ClusterGeneration > 0
	})
	snapshot := filepath.Join(s.Dir, "east-etcd.snapshot")
	if err := east.ControlPlane.Snapshot(ctx, snapshot); err != nil {
		t.Fatal(err)
	}
	t.Logf("backup of east's etcd taken at generation %d", backedUp.Status.ClusterGeneration)
	// The backup is detected once the authority has moved the generation on
	// twice: a copy presenting the previous generation is still accepted,
	// since the leader writes a new one into the Fence a moment after it
	// moves. Generations are times, not counts: each new one seen is one
	// move.
	seen := map[int64]bool{}
	waitFence(t, ctx, east, "east's generation moves twice past the backup's", 10*generationPeriod, func(f *fencegatev1alpha1.Fence) bool {
		if g := f.Status.ClusterGeneration; g > backedUp.Status.ClusterGeneration {
			seen[g] = true
		}
		return len(seen) >= 2
	})

	restored, err := s.AddCluster(ctx, stack.ClusterSpec{Name: "east", Label: "east-restored", Epoch: 1, RestoreFrom: snapshot})
	if err != nil {
		t.Fatalf("start the control plane restored from east's backup: %v", err)
	}
	eastUID, err := east.ControlPlane.KubeSystemUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if uid, err := restored.ControlPlane.KubeSystemUID(ctx); err != nil || uid != eastUID {
		t.Fatalf("the restored control plane's kube-system UID is %q (%v), want east's %q", uid, err, eastUID)
	}
	f := waitFence(t, ctx, restored, "the restored copy is told CLUSTER_RESTORED", time.Minute, func(f *fencegatev1alpha1.Fence) bool {
		return f.Status.FenceReason == "CLUSTER_RESTORED" && conditions(f) == "False/ClusterRestored True/ClusterRestored"
	})
	if c := meta.FindStatusCondition(f.Status.Conditions, fencegatev1alpha1.ConditionHolding); c == nil || !strings.Contains(c.Message, "restored") {
		t.Errorf("the restored copy's Holding condition does not say it looks restored: %+v", c)
	}

	// Both copies are written to at once: only the real east admits.
	eastWrites, restoredWrites := startWriter(ctx, east), startWriter(ctx, restored)
	eastWrites.waitResults(t, 5)
	restoredWrites.waitResults(t, 5)
	for _, w := range restoredWrites.stop() {
		if w.admitted {
			t.Fatalf("the restored copy admitted a Component write at %s", w.start.Format(time.RFC3339Nano))
		}
	}
	for _, w := range eastWrites.stop() {
		if !w.admitted {
			t.Fatalf("east refused a Component write while the restored copy ran beside it: %s", w.stderr)
		}
	}

	// An operator's decision: fail over to the copy.
	out, stderr, exit, err := s.Failover(ctx, "--to", "east-restored", "--wait", "--timeout", "1m")
	if err != nil || exit != 0 {
		t.Fatalf("fencegate failover --to east-restored: exit %d %v\n%s%s", exit, err, out, stderr)
	}
	t.Logf("fencegate failover --to east-restored --wait:\n%s", out)
	waitFence(t, ctx, restored, "the restored copy holds the fence at epoch 2", 30*time.Second, is(holdingEnforced, 2, 1))
	waitFence(t, ctx, east, "the original east is fenced as regressed", 30*time.Second, func(f *fencegatev1alpha1.Fence) bool {
		return f.Status.State == "epoch_regressed"
	})
	if res, err := restored.ControlPlane.Kubectl(ctx, []byte(`{"apiVersion":"components.fencegate.dev/v1alpha1","kind":"Component","metadata":{"name":"after-failover","namespace":"default"},"spec":{"enabled":true}}`), "apply", "-f", "-"); err != nil || res.ExitCode != 0 {
		t.Fatalf("the restored copy, now the holder, refused a Component: %v %s", err, res.Stderr)
	}
}
