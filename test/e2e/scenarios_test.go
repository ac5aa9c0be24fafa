package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/test/stack"
)

// startStack runs the authority and the given clusters as processes, the
// way they are deployed, with a short lease so that expiry tests are quick.
func startStack(t *testing.T, ctx context.Context, clusters ...stack.ClusterSpec) *stack.Stack {
	t.Helper()
	return stack.StartForTest(t, ctx, stack.Options{
		Clusters: clusters,
		LeaseTTL: 4 * time.Second,
		Say:      t.Logf,
	})
}

func componentJSON(name string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"components.fencegate.dev/v1alpha1","kind":"Component","metadata":{"name":%q,"namespace":"default"},"spec":{"enabled":true}}`, name)
}

// dryRunCreate asks the cluster to admit a new Component without keeping
// it, and returns kubectl's exit code and error output.
func dryRunCreate(t *testing.T, ctx context.Context, c *stack.Cluster, name string) (int, string) {
	t.Helper()
	res, err := c.ControlPlane.Kubectl(ctx, componentJSON(name), "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	return res.ExitCode, res.Stderr
}

// waitAdmission polls until the cluster admits (want true) or denies (want
// false) a new Component, and returns the last denial.
func waitAdmission(t *testing.T, ctx context.Context, c *stack.Cluster, want bool, timeout time.Duration) string {
	t.Helper()
	var denial string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		exit, stderr := dryRunCreate(t, ctx, c, "probe")
		denial = stderr
		return (exit == 0) == want, nil
	})
	if err != nil {
		t.Fatalf("%s: waiting for admission=%v: %v (last answer: %s)", c.Name, want, err, denial)
	}
	return denial
}

func getFence(t *testing.T, ctx context.Context, s *stack.Stack) *fencev1.Fence {
	t.Helper()
	var fence *fencev1.Fence
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := s.Fence.GetFence(ctx, &fencev1.GetFenceRequest{Domain: "default"})
		if err != nil {
			return false, nil //nolint:nilerr // the authority may be starting; keep asking
		}
		fence = resp.GetFence()
		return true, nil
	})
	if err != nil {
		t.Fatalf("get the fence: %v", err)
	}
	return fence
}

// TestAuthorityOutage: the active cluster fails closed once its lease runs
// out while the authority is down, says why, and recovers by itself when the
// authority returns; a restarted authority has lost nothing.
func TestAuthorityOutage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startStack(t, ctx, stack.ClusterSpec{Name: "east", Epoch: 1}, stack.ClusterSpec{Name: "west", Epoch: 1})
	east := s.Cluster("east")
	waitAdmission(t, ctx, east, true, time.Minute)

	t.Run("a restarted authority keeps holder, token and highest epochs", func(t *testing.T) {
		before := getFence(t, ctx, s)
		if err := s.Authority.Stop(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		if err := s.StartAuthority(ctx); err != nil {
			t.Fatal(err)
		}
		after := getFence(t, ctx, s)
		if before.GetHolder().GetClusterUid() != after.GetHolder().GetClusterUid() || before.GetHolder().GetToken() != after.GetHolder().GetToken() {
			t.Errorf("holder before restart %v, after %v", before.GetHolder(), after.GetHolder())
		}
		highest := func(f *fencev1.Fence) map[string]uint64 {
			m := map[string]uint64{}
			for _, c := range f.GetClusters() {
				m[c.GetClusterName()] = c.GetHighestEpoch()
			}
			return m
		}
		if b, a := highest(before), highest(after); fmt.Sprint(b) != fmt.Sprint(a) || len(a) != 2 {
			t.Errorf("highest epochs before restart %v, after %v", b, a)
		}
		waitAdmission(t, ctx, east, true, time.Minute)
	})

	t.Run("authority down: the active cluster fails closed after its lease, then recovers", func(t *testing.T) {
		s.Authority.Kill()
		denial := waitAdmission(t, ctx, east, false, time.Minute)
		for _, want := range []string{`cluster "east" (epoch 1) cannot confirm that it holds the ownership fence`, "connection to the fence authority"} {
			if !strings.Contains(denial, want) {
				t.Errorf("denial while the authority is down lacks %q:\n%s", want, denial)
			}
		}
		if err := s.StartAuthority(ctx); err != nil {
			t.Fatal(err)
		}
		waitAdmission(t, ctx, east, true, time.Minute)
		if h := getFence(t, ctx, s).GetHolder(); h.GetClusterName() != "east" {
			t.Errorf("after the outage the holder is %v, want east: a standby of equal epoch must not take over", h)
		}
	})
}

// TestRestoredClusterIsRefused: a cluster restored from a backup keeps its
// kube-system UID but comes back with an old epoch; the authority refuses it
// and its Components are held.
func TestRestoredClusterIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := startStack(t, ctx, stack.ClusterSpec{Name: "east", Epoch: 1})
	east := s.Cluster("east")
	waitAdmission(t, ctx, east, true, time.Minute)
	if res, err := east.ControlPlane.Kubectl(ctx, componentJSON("billing"), "apply", "-f", "-"); err != nil || res.ExitCode != 0 {
		t.Fatalf("create billing: %v %s", err, res.Stderr)
	}

	// The cluster moved on to epoch 3 ...
	if err := s.RolloutEpoch(ctx, east, 3); err != nil {
		t.Fatal(err)
	}
	waitAdmission(t, ctx, east, true, time.Minute)
	// ... and is then restored with the configuration of epoch 1. Its
	// fencegate is ready: it must answer admission requests, to refuse them.
	if err := s.RolloutEpoch(ctx, east, 1); err != nil {
		t.Fatal(err)
	}

	// Ready means the fence state is loaded, not that the authority has
	// answered yet: until it has, the refusal says there is no answer.
	var denial string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, denial = dryRunCreate(t, ctx, east, "after-restore")
		return strings.Contains(denial, "declares epoch 1, lower than an epoch it declared before"), nil
	}); err != nil {
		t.Errorf("denial of a restored cluster:\n%s", denial)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		res, err := east.ControlPlane.Kubectl(ctx, nil, "get", "component", "billing", "-n", "default",
			"-o", `jsonpath={.status.conditions[?(@.type=="SourceConflict")].reason}`)
		return err == nil && res.Stdout == "ClusterEpochRegressed", nil
	})
	if err != nil {
		t.Errorf("billing never showed SourceConflict reason ClusterEpochRegressed: %v", err)
	}
	if f := getFence(t, ctx, s); f.GetHolder().GetEpoch() != 3 {
		t.Errorf("the fence should still be held at epoch 3: %v", f.GetHolder())
	}
}
