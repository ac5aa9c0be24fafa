package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/test/stack"
)

// startFenceStack runs an authority with mTLS and an authorization file,
// and the given clusters, with short leases so that the tests of expiry are
// quick.
func startFenceStack(t *testing.T, ctx context.Context, clusters ...stack.ClusterSpec) *stack.Stack {
	t.Helper()
	return stack.StartForTest(t, ctx, stack.Options{
		Clusters:      clusters,
		LeaseTTL:      4 * time.Second,
		InstanceLease: 3 * time.Second,
		MTLS:          true,
		Say:           t.Logf,
	})
}

// fence reads a cluster's Fence of domain default.
func fence(t *testing.T, ctx context.Context, c *stack.Cluster) *fencegatev1alpha1.Fence {
	t.Helper()
	var f fencegatev1alpha1.Fence
	if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: "default"}, &f); err != nil {
		t.Fatalf("%s: get the Fence: %v", c.Name, err)
	}
	return &f
}

// waitFence polls a cluster's Fence until ok, and returns it.
func waitFence(t *testing.T, ctx context.Context, c *stack.Cluster, what string, timeout time.Duration, ok func(*fencegatev1alpha1.Fence) bool) *fencegatev1alpha1.Fence {
	t.Helper()
	var f fencegatev1alpha1.Fence
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: "default"}, &f); err != nil {
			return false, nil //nolint:nilerr // not created yet; keep polling
		}
		return ok(&f), nil
	})
	if err != nil {
		t.Fatalf("%s: the Fence never became %s: %v\nlast status: %s", c.Label, what, err, statusYAML(&f))
	}
	return &f
}

func statusYAML(f *fencegatev1alpha1.Fence) string {
	var b strings.Builder
	fmt.Fprintf(&b, "state %s epoch %d token %d holder %+v pending %+v observedGeneration %d/%d components %+v",
		f.Status.State, f.Status.Epoch, f.Status.Token, f.Status.Holder, f.Status.Pending, f.Status.ObservedGeneration, f.Generation, f.Status.Components)
	for _, c := range f.Status.Conditions {
		fmt.Fprintf(&b, "\n  %s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, i := range f.Status.Instances {
		fmt.Fprintf(&b, "\n  instance %+v", i)
	}
	return b.String()
}

// conditions are the status and reason of a Fence's Holding and Enforced,
// as "True/FenceHeld True/FenceHeld".
func conditions(f *fencegatev1alpha1.Fence) string {
	var out []string
	for _, typ := range []string{fencegatev1alpha1.ConditionHolding, fencegatev1alpha1.ConditionEnforced} {
		c := meta.FindStatusCondition(f.Status.Conditions, typ)
		if c == nil {
			out = append(out, "none")
			continue
		}
		out = append(out, string(c.Status)+"/"+c.Reason)
	}
	return strings.Join(out, " ")
}

// is returns a check that the Fence's conditions are want and, when not
// zero, its epoch is epoch, observed in the current generation, with one
// entry per replica.
func is(want string, epoch int64, replicas int) func(*fencegatev1alpha1.Fence) bool {
	return func(f *fencegatev1alpha1.Fence) bool {
		return conditions(f) == want && (epoch == 0 || f.Status.Epoch == epoch) && f.Status.ObservedGeneration == f.Generation &&
			(replicas == 0 || len(f.Status.Instances) == replicas)
	}
}

const (
	holdingEnforced = "True/FenceHeld True/FenceHeld"
	fencedEnforced  = "False/ClusterFenced True/ClusterFenced"
)

// TestFenceObject: each cluster's Fence, on two real control planes served
// by real fencegate processes (west by two replicas) and an authority with
// mTLS: its status through every transition, the CEL rule on spec.epoch,
// failover and failback by `fencegate failover`, its timeout and refusals.
// The subtests run in order on one stack.
func TestFenceObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s := startFenceStack(t, ctx, stack.ClusterSpec{Name: "east", Epoch: 1}, stack.ClusterSpec{Name: "west", Epoch: 1, Replicas: 2})
	east, west := s.Cluster("east"), s.Cluster("west")
	for _, c := range []*stack.Cluster{east, west} {
		if res, err := c.ControlPlane.Kubectl(ctx, componentJSON("billing"), "apply", "-f", "-"); err != nil || (c == east && res.ExitCode != 0) {
			t.Fatalf("%s: create billing: %v %s", c.Name, err, res.Stderr)
		}
	}

	t.Run("fencegate run creates the Fence, spec.epoch unset", func(t *testing.T) {
		for _, c := range []*stack.Cluster{east, west} {
			if f := fence(t, ctx, c); f.Spec.Epoch != nil {
				t.Errorf("%s: spec.epoch = %d, want unset", c.Name, *f.Spec.Epoch)
			}
		}
	})

	t.Run("holding and fenced, enforced by every replica, and kubectl's columns", func(t *testing.T) {
		e := waitFence(t, ctx, east, "holding and enforced", time.Minute, is(holdingEnforced, 1, 1))
		w := waitFence(t, ctx, west, "fenced and enforced", time.Minute, is(fencedEnforced, 1, 2))
		if e.Status.Token == 0 || e.Status.Holder == nil || e.Status.Holder.Name != "east" || e.Status.Cluster == nil || e.Status.Cluster.Name != "east" {
			t.Errorf("east: %s", statusYAML(e))
		}
		if w.Status.Holder == nil || w.Status.Holder.Name != "east" || w.Status.Token != 0 || w.Status.Components == nil || w.Status.Components.Summary != "0/0 held" {
			t.Errorf("west: %s", statusYAML(w))
		}
		if e.Status.Components == nil || e.Status.Components.Summary != "0/1 held" || e.Status.Since == nil || e.Status.LastDeclaration == nil {
			t.Errorf("east: %s", statusYAML(e))
		}
		res, err := east.ControlPlane.Kubectl(ctx, nil, "get", "fences")
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("kubectl get fences: %v %s", err, res.Stderr)
		}
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if got := strings.Join(strings.Fields(lines[0]), " "); got != "NAME STATE EPOCH HOLDER TOKEN COMPONENTS HELD AGE" {
			t.Errorf("columns %q", got)
		}
		row := parseTable(lines)["default"]
		if row["STATE"] != "active" || row["EPOCH"] != "1" || row["HOLDER"] != "east" || row["TOKEN"] != fmt.Sprint(e.Status.Token) || row["COMPONENTS"] != "0/1 held" || row["HELD"] != "" {
			t.Errorf("kubectl get fences:\n%s", res.Stdout)
		}
		res, err = east.ControlPlane.Kubectl(ctx, nil, "wait", "--for=condition=Holding", "fence/default", "--timeout=10s")
		if err != nil || res.ExitCode != 0 {
			t.Errorf("kubectl wait --for=condition=Holding: %v %s", err, res.Stderr)
		}
	})

	t.Run("heartbeats write nothing", func(t *testing.T) {
		// The agents renew every ~0.7s (a third of the lease less the
		// margin): several heartbeats go by.
		before := map[string]string{}
		for _, c := range []*stack.Cluster{east, west} {
			before[c.Name] = fence(t, ctx, c).ResourceVersion
		}
		time.Sleep(3 * time.Second)
		for _, c := range []*stack.Cluster{east, west} {
			if f := fence(t, ctx, c); f.ResourceVersion != before[c.Name] {
				t.Errorf("%s: the Fence was written (resourceVersion %s → %s) while only heartbeats happened:\n%s", c.Name, before[c.Name], f.ResourceVersion, statusYAML(f))
			}
		}
	})

	t.Run("the CEL rule refuses to lower spec.epoch or to unset it", func(t *testing.T) {
		// Raising east's own epoch keeps it the holder.
		res, err := east.ControlPlane.Kubectl(ctx, nil, "patch", "fence", "default", "--type", "merge", "-p", `{"spec":{"epoch":2}}`)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("raise east's spec.epoch: %v %s", err, res.Stderr)
		}
		waitFence(t, ctx, east, "holding at epoch 2", 30*time.Second, is(holdingEnforced, 2, 1))
		for name, patch := range map[string]string{"lower": `{"spec":{"epoch":1}}`, "unset": `{"spec":{"epoch":null}}`, "drop the spec": `{"spec":null}`} {
			res, err := east.ControlPlane.Kubectl(ctx, nil, "patch", "fence", "default", "--type", "merge", "-p", patch)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode == 0 || !strings.Contains(res.Stderr, "spec.epoch may only rise") {
				t.Errorf("%s: kubectl patch exit %d, want the CEL rule's refusal:\n%s%s", name, res.ExitCode, res.Stdout, res.Stderr)
			}
		}
		if f := fence(t, ctx, east); f.Spec.Epoch == nil || *f.Spec.Epoch != 2 {
			t.Errorf("spec.epoch = %v after the refusals, want 2", f.Spec.Epoch)
		}
		res, err = east.ControlPlane.Kubectl(ctx, nil, "patch", "fence", "default", "--type", "merge", "-p", `{"spec":{"epoch":0}}`)
		if err != nil || res.ExitCode == 0 || !strings.Contains(res.Stderr, "should be greater than or equal to 1") {
			t.Errorf("spec.epoch 0: %v exit %d %s", err, res.ExitCode, res.Stderr)
		}
	})
	t.Run("failover and failback by the command, with no restart and no admission gap", func(t *testing.T) {
		pids := map[string][]int{}
		for _, c := range []*stack.Cluster{east, west} {
			for _, r := range c.Replicas {
				pids[c.Name] = append(pids[c.Name], r.Run.Pid())
			}
		}
		for _, step := range []struct {
			to, from *stack.Cluster
			epoch    int64
			replicas int
		}{{west, east, 3, 2}, {east, west, 4, 1}} {
			target, old := startWriter(ctx, step.to), startWriter(ctx, step.from)
			// The writers answer before the failover starts.
			target.waitResults(t, 2)
			old.waitResults(t, 2)
			out, stderr, exit, err := s.Failover(ctx, "--to", step.to.Name, "--from", step.from.Name, "--wait", "--timeout", "1m")
			if err != nil || exit != 0 {
				t.Fatalf("failover to %s: exit %d %v\n%s%s", step.to.Name, exit, err, out, stderr)
			}
			t.Logf("fencegate failover --to %s --from %s --wait:\n%s", step.to.Name, step.from.Name, out)
			for _, want := range []string{"epoch raised", "old holder told", "old holder stopped admitting", "fence granted", "new holder re-marked", "old holder re-marked", "failover complete in"} {
				if !strings.Contains(out, want) {
					t.Errorf("the timeline lacks %q", want)
				}
			}
			// The command returns once both sides enforce the move:
			// nothing is left to wait for.
			if f := fence(t, ctx, step.to); !is(holdingEnforced, step.epoch, step.replicas)(f) || f.Spec.Epoch == nil || *f.Spec.Epoch != step.epoch {
				t.Errorf("%s after the failover: spec.epoch %v, %s", step.to.Name, f.Spec.Epoch, statusYAML(f))
			}
			if f := fence(t, ctx, step.from); conditions(f) != fencedEnforced || f.Status.Holder.Name != step.to.Name {
				t.Errorf("%s after the failover: %s", step.from.Name, statusYAML(f))
			}
			// The writers go on a little after the move.
			target.waitResults(t, len(target.snapshot())+2)
			ts, olds := target.stop(), old.stop()
			first := firstAdmitted(ts)
			if first < 0 {
				t.Fatalf("%s admitted none of %d writes", step.to.Name, len(ts))
			}
			refusedBefore := 0
			for i, r := range ts {
				switch {
				case i < first:
					refusedBefore++
				case !r.admitted:
					t.Errorf("%s refused a write after it had admitted one (write %d of %d): an admission gap: %s", step.to.Name, i, len(ts), r.stderr)
				}
			}
			lastOld := -1
			for i, r := range olds {
				if r.admitted {
					lastOld = i
				}
			}
			for i := lastOld - 1; i >= 0; i-- {
				if !olds[i].admitted {
					t.Errorf("%s admitted a write after refusing one: its writes %v", step.from.Name, admittedFlags(olds))
					break
				}
			}
			if lastOld >= 0 && !olds[lastOld].start.Before(ts[first].end) {
				t.Errorf("%s admitted a write that began after %s's first admitted one had ended", step.from.Name, step.to.Name)
			}
			t.Logf("%s: %d writes refused before it held the fence, none after; %s: %d admitted, then refused", step.to.Name, refusedBefore, step.from.Name, lastOld+1)
		}
		for _, c := range []*stack.Cluster{east, west} {
			for i, r := range c.Replicas {
				if r.Run.Exited() || r.Run.Pid() != pids[c.Name][i] {
					t.Errorf("%s's fencegate process %d restarted: the failover must not restart anything", c.Name, i)
				}
			}
		}
		// Every replica says the state is enforced; the leaders of west
		// (failed over to) and east (failed back to) timed the move.
		for _, c := range []*stack.Cluster{east, west} {
			var failovers float64
			for _, r := range c.Replicas {
				families := scrape(t, ctx, r.Metrics)
				if got := families["fencegate_fence_enforced"].GetMetric(); len(got) != 1 || got[0].GetGauge().GetValue() != 1 {
					t.Errorf("%s, replica %s: fencegate_fence_enforced = %v, want 1", c.Name, r.Metrics, got)
				}
				if got := families["fencegate_log_lines_dropped_total"].GetMetric(); len(got) != 3 {
					t.Errorf("%s, replica %s: fencegate_log_lines_dropped_total has %d levels, want debug, info and error", c.Name, r.Metrics, len(got))
				}
				for _, m := range families["fencegate_failover_duration_seconds"].GetMetric() {
					failovers += float64(m.GetHistogram().GetSampleCount())
				}
			}
			if failovers < 1 {
				t.Errorf("%s: no failover counted in fencegate_failover_duration_seconds", c.Name)
			}
		}
	})

	t.Run("a replica that is gone holds Enforced back only until its Lease ends", func(t *testing.T) {
		// West is fenced, enforced by its two replicas. One dies without a
		// word, then the fence moves to west: the dead replica's entry
		// still says fenced, so west is not enforcing until its Lease
		// ends and the leader prunes it.
		gone := west.Replicas[1]
		var before []string
		for _, e := range fence(t, ctx, west).Status.Instances {
			before = append(before, e.Name)
		}
		gone.Run.Kill()
		killed := time.Now()
		out, stderr, exit, err := s.Failover(ctx, "--to", "west", "--from", "east", "--wait", "--timeout", "1m")
		if err != nil || exit != 0 {
			t.Fatalf("failover to west: exit %d %v\n%s%s", exit, err, out, stderr)
		}
		took := time.Since(killed)
		f := fence(t, ctx, west)
		if len(f.Status.Instances) != 1 || !slices.Contains(before, f.Status.Instances[0].Name) {
			t.Errorf("west's instances %v, then %+v: want the entry of the dead replica pruned", before, f.Status.Instances)
		}
		// The Lease was renewed at most a third of it (1s) before the
		// death.
		if took < 2*time.Second {
			t.Errorf("west was enforcing %s after a replica died, before that replica's Lease (3s, renewed every 1s) ended", took)
		}
		var leases coordinationv1.LeaseList
		if err := west.ControlPlane.Client.List(ctx, &leases, client.InNamespace(stack.Namespace), client.MatchingLabels{"fencegate.dev/fence-domain": "default"}); err != nil {
			t.Fatal(err)
		}
		if len(leases.Items) != 1 || *leases.Items[0].Spec.HolderIdentity != f.Status.Instances[0].Name {
			t.Errorf("west's instance Leases: %d, want only the running replica's", len(leases.Items))
		}
		t.Logf("with one of its two replicas dead, west held the fence and enforced it %s after the death", took.Round(10*time.Millisecond))

		// A new replica joins at the Fence's epoch, and reports.
		west.Replicas = slices.Delete(west.Replicas, 1, 2)
		if err := s.StartReplica(ctx, west); err != nil {
			t.Fatal(err)
		}
		waitFence(t, ctx, west, "enforced by two replicas again", 30*time.Second, is(holdingEnforced, 5, 2))

		// A replica that stops on SIGTERM takes its entry and its Lease
		// with it before it exits: nobody waits for its Lease to end.
		leaving := west.Replicas[1]
		if err := leaving.Run.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		west.Replicas = west.Replicas[:1]
		if err := west.ControlPlane.Client.List(ctx, &leases, client.InNamespace(stack.Namespace), client.MatchingLabels{"fencegate.dev/fence-domain": "default"}); err != nil {
			t.Fatal(err)
		}
		if f := fence(t, ctx, west); len(f.Status.Instances) != 1 || len(leases.Items) != 1 {
			t.Errorf("after a replica stopped: %d entries, %d Leases; want the stopped one's removed on its way out:\n%s", len(f.Status.Instances), len(leases.Items), statusYAML(f))
		}
		if err := s.StartReplica(ctx, west); err != nil {
			t.Fatal(err)
		}
		waitFence(t, ctx, west, "enforced by two replicas again", 30*time.Second, is(holdingEnforced, 5, 2))
	})

	t.Run("timeout: the old holder is cut off and the target waits for its lease", func(t *testing.T) {
		// West holds the fence. Its processes die without releasing: the
		// authority keeps their leases (4s), and east, asked to take
		// over, is acquiring meanwhile.
		for _, r := range west.Replicas {
			r.Run.Kill()
		}
		west.Replicas = nil
		out, stderr, exit, err := s.Failover(ctx, "--to", "east", "--from", "west", "--wait", "--timeout", "1s")
		if err != nil || exit != 2 {
			t.Fatalf("failover with a timeout of 1s: exit %d (want 2) %v\n%s%s", exit, err, out, stderr)
		}
		for _, want := range []string{"the failover was not complete after 1s; where things stand", "east: acquiring at epoch 6, holder west@5, takeover by east@6 pending until", "Holding=False (FenceAcquiring)"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("the timeout's report lacks %q:\n%s", want, stderr)
			}
		}
		f := fence(t, ctx, east)
		if f.Status.State != "acquiring" || f.Status.Pending == nil || f.Status.Pending.Name != "east" || f.Status.LeaseExpiresAt == nil {
			t.Errorf("east while acquiring: %s", statusYAML(f))
		}
		// Once west's leases end, east holds the fence without anyone
		// asking again.
		waitFence(t, ctx, east, "holding after west's leases ended", 30*time.Second, is(holdingEnforced, 6, 1))
		if f := fence(t, ctx, east); f.Status.Pending != nil || f.Status.LeaseExpiresAt != nil {
			t.Errorf("east holds, yet its Fence names a pending takeover: %s", statusYAML(f))
		}
		for range 2 {
			if err := s.StartReplica(ctx, west); err != nil {
				t.Fatal(err)
			}
		}
		waitFence(t, ctx, west, "fenced by east", 30*time.Second, is(fencedEnforced, 5, 2))
	})

	t.Run("refused: permission denied", func(t *testing.T) {
		// The authority no longer lets west's identity declare: west's
		// next heartbeat is refused.
		if err := s.PKI.Authorize("east"); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := s.PKI.Authorize("east", "west"); err != nil {
				t.Fatal(err)
			}
		}()
		waitFence(t, ctx, west, "refused by the authority", 30*time.Second, is("False/PermissionDenied True/PermissionDenied", 5, 2))
		out, stderr, exit, err := s.Failover(ctx, "--to", "west", "--from", "east", "--wait", "--timeout", "1m")
		if err != nil || exit != 3 {
			t.Fatalf("failover to a cluster the authority refuses: exit %d (want 3) %v\n%s%s", exit, err, out, stderr)
		}
		for _, want := range []string{"the failover is refused: permission denied", "PermissionDenied", "spiffe://fencegate.demo/cluster/west"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("the refusal lacks %q:\n%s", want, stderr)
			}
		}
		waitFence(t, ctx, west, "refused by the authority, and enforcing that", 30*time.Second, is("False/PermissionDenied True/PermissionDenied", 7, 2))
		// Let west declare again: it declares the epoch it was asked for
		// and takes the fence, as the operator asked.
		if err := s.PKI.Authorize("east", "west"); err != nil {
			t.Fatal(err)
		}
		waitFence(t, ctx, west, "holding once the authority lets it declare", time.Minute, is(holdingEnforced, 7, 2))
	})

	t.Run("refused: the authority is unreachable", func(t *testing.T) {
		if err := s.Authority.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		out, stderr, exit, err := s.Failover(ctx, "--to", "east", "--wait", "--timeout", "1m")
		if err != nil || exit != 3 {
			t.Fatalf("failover with the authority down: exit %d (want 3) %v\n%s%s", exit, err, out, stderr)
		}
		if !strings.Contains(out, "the holder's side unchecked (no --from)") || !strings.Contains(stderr, "the failover is refused: the authority is unreachable from east") {
			t.Errorf("failover output:\n%s%s", out, stderr)
		}
		// Unknown, enforcing that, and still at epoch 6, the one the
		// authority accepted last: epoch 8 is pending.
		unreachable := func(f *fencegatev1alpha1.Fence) bool {
			c := meta.FindStatusCondition(f.Status.Conditions, fencegatev1alpha1.ConditionEpochAccepted)
			return conditions(f) == "False/FenceUnknown True/FenceUnknown" && f.Status.Epoch == 6 &&
				c != nil && c.Reason == fencegatev1alpha1.ReasonEpochPending && c.ObservedGeneration == f.Generation
		}
		if f := waitFence(t, ctx, east, "unknown and enforcing that, epoch 8 pending", 30*time.Second, unreachable); f.Status.FenceReason != "AUTHORITY_UNREACHABLE" {
			t.Errorf("east without an authority: %s", statusYAML(f))
		}
		// West's lease ran out too: nobody holds the fence. When the
		// authority is back, east declares the epoch it was asked for.
		if f := fence(t, ctx, west); f.Status.State != "unknown" || f.Status.FenceReason != "LEASE_EXPIRED" {
			t.Errorf("west without an authority: %s", statusYAML(f))
		}
		if err := s.StartAuthority(ctx); err != nil {
			t.Fatal(err)
		}
		waitFence(t, ctx, east, "holding once the authority is back", time.Minute, is(holdingEnforced, 8, 1))
		waitFence(t, ctx, west, "fenced once the authority is back", time.Minute, is(fencedEnforced, 7, 2))
	})

	t.Run("a Fence deleted by hand is made again at the epoch the cluster declares", func(t *testing.T) {
		// West's Fence is deleted and its fencegate rolled out at the
		// epoch of its configuration, 1: the running processes make the
		// Fence again at the epoch their agents declare, 7, so the new
		// ones declare 7 too instead of regressing to 1.
		deleted := fence(t, ctx, west)
		if err := west.ControlPlane.Client.Delete(ctx, deleted); err != nil {
			t.Fatal(err)
		}
		f := waitFence(t, ctx, west, "made again", 30*time.Second, func(f *fencegatev1alpha1.Fence) bool { return f.UID != deleted.UID })
		if f.Spec.Epoch == nil || *f.Spec.Epoch != 7 {
			t.Errorf("the Fence made again has spec.epoch %v, want 7: %s", f.Spec.Epoch, statusYAML(f))
		}
		if err := s.RolloutEpoch(ctx, west, 1); err != nil {
			t.Fatal(err)
		}
		waitFence(t, ctx, west, "fenced at the epoch it declared", 30*time.Second, is(fencedEnforced, 7, 2))
		out, stderr, exit, err := s.Failover(ctx, "--to", "west", "--epoch", "2", "--wait", "--timeout", "1m")
		if err != nil || exit != 1 || !strings.Contains(stderr, "--epoch 2 is not above the epoch 8 of the holder east") {
			t.Errorf("failover to epoch 2, below the holder's: exit %d (want 1) %v\n%s%s", exit, err, out, stderr)
		}
		out, stderr, exit, err = s.Failover(ctx, "--to", "west", "--epoch", "9", "--wait", "--timeout", "1m")
		if err != nil || exit != 0 {
			t.Fatalf("failover of west at epoch 9: exit %d %v\n%s%s", exit, err, out, stderr)
		}
		waitFence(t, ctx, west, "holding", 30*time.Second, is(holdingEnforced, 9, 2))
	})

	t.Run("the RBAC of the failover: no right to patch Fences, no failover", func(t *testing.T) {
		kubeconfig, _, err := east.ControlPlane.AddUser("someone")
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, s.Binary, "failover", "--kubeconfig", kubeconfig, "--to", "east")
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), "may not read Fence \"default\": bind your user or group to the chart's <release>-failover ClusterRole") {
			t.Errorf("failover without rights: %v\n%s", err, out)
		}
	})
}

// write is one kubectl apply and its answer.
type write struct {
	start, end time.Time
	admitted   bool
	stderr     string
}

// writer applies a Component on one cluster with the real kubectl, again
// and again, and records every answer.
type writer struct {
	c      *stack.Cluster
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	results []write
}

// startWriter starts applying Component "loop" on c, a new version each
// time, until stop.
func startWriter(ctx context.Context, c *stack.Cluster) *writer {
	return startWriterIn(ctx, c, "default")
}

// startWriterIn is startWriter in namespace ns.
func startWriterIn(ctx context.Context, c *stack.Cluster, ns string) *writer {
	ctx, cancel := context.WithCancel(ctx)
	w := &writer{c: c, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		// Every apply changes the version: kubectl sends no request for
		// an apply that changes nothing, which would pass for an admission.
		run := time.Now().UnixNano()
		for i := 0; ctx.Err() == nil; i++ {
			manifest := fmt.Appendf(nil, `{"apiVersion":"components.fencegate.dev/v1alpha1","kind":"Component","metadata":{"name":"loop","namespace":%q},"spec":{"enabled":true,"chart":{"name":"loop","version":"1.%d.%d"}}}`, ns, run, i)
			start := time.Now()
			res, err := c.ControlPlane.Kubectl(ctx, manifest, "apply", "-f", "-")
			if ctx.Err() != nil {
				return
			}
			r := write{start: start, end: time.Now(), admitted: err == nil && res.ExitCode == 0, stderr: res.Stderr}
			if err != nil {
				r.stderr = err.Error()
			}
			w.mu.Lock()
			w.results = append(w.results, r)
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writer) snapshot() []write {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.results)
}

// waitResults waits until n writes were answered.
func (w *writer) waitResults(t *testing.T, n int) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return len(w.snapshot()) >= n, nil
	})
	if err != nil {
		t.Fatalf("%s: %d writes answered, want %d", w.c.Name, len(w.snapshot()), n)
	}
}

// stop ends the writes and returns their answers.
func (w *writer) stop() []write {
	w.cancel()
	<-w.done
	return w.snapshot()
}

func firstAdmitted(ws []write) int {
	return slices.IndexFunc(ws, func(w write) bool { return w.admitted })
}

func admittedFlags(ws []write) []bool {
	out := make([]bool, len(ws))
	for i, w := range ws {
		out[i] = w.admitted
	}
	return out
}

// scrape reads the Prometheus metrics a process serves on addr.
func scrape(t *testing.T, ctx context.Context, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the metrics of %s: %v", addr, err)
	}
	return families
}
