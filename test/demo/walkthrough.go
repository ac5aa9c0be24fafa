package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/test/stack"
)

// componentYAML is the Component the walkthrough applies; %s is the chart
// version, so that a second apply is an update.
const componentYAML = `apiVersion: components.fencegate.dev/v1alpha1
kind: Component
metadata:
  name: billing
  namespace: default
spec:
  enabled: true
  chart:
    repository: https://charts.example.com
    name: billing
    version: %s
`

// walkthrough drives the failover and checks each step's outcome; it fails
// at the first step whose outcome is not what fencegate promises.
type walkthrough struct {
	s    *stack.Stack
	out  io.Writer
	step int
}

func (w *walkthrough) title(format string, args ...any) {
	w.step++
	fmt.Fprintf(w.out, "\nStep %d · %s\n", w.step, fmt.Sprintf(format, args...))
}

func (w *walkthrough) show(text string) {
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		fmt.Fprintf(w.out, "    %s\n", line)
	}
}

func (w *walkthrough) proves(format string, args ...any) {
	fmt.Fprintf(w.out, "  ✓ %s\n", fmt.Sprintf(format, args...))
}

// kubectl runs the real kubectl on a cluster and shows the command and what
// it printed.
func (w *walkthrough) kubectl(ctx context.Context, n *stack.Cluster, stdin []byte, args ...string) (stderr string, exit int, err error) {
	fmt.Fprintf(w.out, "  $ kubectl --context %s %s\n", n.Name, strings.Join(args, " "))
	res, err := n.ControlPlane.Kubectl(ctx, stdin, args...)
	if err != nil {
		return "", 0, err
	}
	w.show(res.Stdout + conciseError(res.Stderr))
	return res.Stderr, res.ExitCode, nil
}

// fenceStatus shows `fencegate fence status`, as an operator would run it.
func (w *walkthrough) fenceStatus(ctx context.Context) (string, error) {
	fmt.Fprintf(w.out, "  $ fencegate fence status --authority %s\n", w.s.AuthorityAddr)
	out, err := exec.CommandContext(ctx, w.s.Binary, "fence", "status", "--authority", w.s.AuthorityAddr).CombinedOutput()
	w.show(string(out))
	if err != nil {
		return "", fmt.Errorf("fencegate fence status: %w", err)
	}
	return string(out), nil
}

// waitHolder waits until the authority names the given holder.
func (w *walkthrough) waitHolder(ctx context.Context, name string) (*fencev1.Fence, error) {
	var fence *fencev1.Fence
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := w.s.Fence.GetFence(ctx, &fencev1.GetFenceRequest{Domain: "default"})
		if err != nil {
			return false, nil //nolint:nilerr // the authority may be restarting; keep polling
		}
		fence = resp.GetFence()
		return fence.GetHolder().GetClusterName() == name, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s did not become the holder: %w (last state: %v)", name, err, fence)
	}
	return fence, nil
}

// annotation reads one annotation of the billing Component.
func annotation(ctx context.Context, n *stack.Cluster, key string) (string, error) {
	res, err := n.ControlPlane.Kubectl(ctx, nil, "get", "component", "billing", "-n", "default",
		"-o", "jsonpath={.metadata.annotations."+strings.ReplaceAll(strings.ReplaceAll(key, ".", `\.`), "/", `\/`)+"}")
	if err != nil {
		return "", fmt.Errorf("read annotation %s on %s: %w", key, n.Name, err)
	}
	if res.ExitCode != 0 {
		return "", fmt.Errorf("read annotation %s on %s: %s", key, n.Name, res.Stderr)
	}
	return res.Stdout, nil
}

func (w *walkthrough) run(ctx context.Context) error {
	east, west := w.s.Cluster("east"), w.s.Cluster("west")

	w.title("east declares epoch %d to the authority and holds the fence", east.Epoch)
	fence, err := w.waitHolder(ctx, "east")
	if err != nil {
		return err
	}
	if _, err := w.fenceStatus(ctx); err != nil {
		return err
	}
	if !declared(fence, "west") {
		return errors.New("the authority has no declaration from west, although west's fencegate is ready")
	}
	eastToken := fence.GetHolder().GetToken()
	w.proves("the authority granted the fence to east (token %d); west declared epoch %d too and was refused: an equal epoch never takes the fence", eastToken, west.Epoch)

	w.title("a Component created on east is admitted and stamped with east's epoch and token")
	stderr, exit, err := w.kubectl(ctx, east, fmt.Appendf(nil, componentYAML, "1.0.0"), "apply", "-f", "-")
	if err != nil {
		return err
	}
	if exit != 0 {
		return fmt.Errorf("east refused the Component: %s", stderr)
	}
	epoch, err := annotation(ctx, east, "fencegate.dev/epoch")
	if err != nil {
		return err
	}
	token, err := annotation(ctx, east, "fencegate.dev/token")
	if err != nil {
		return err
	}
	if epoch != fmt.Sprint(east.Epoch) || token != fmt.Sprint(eastToken) {
		return fmt.Errorf("east's Component carries fencegate.dev/epoch=%q fencegate.dev/token=%q, want %d and %d", epoch, token, east.Epoch, eastToken)
	}
	w.proves("the mutating webhook stamped fencegate.dev/epoch=%s and fencegate.dev/token=%s: an actuator can tell which holder wrote it", epoch, token)

	w.title("the same Component on west is denied, with a message naming the holder")
	denial, exit, err := w.kubectl(ctx, west, fmt.Appendf(nil, componentYAML, "1.0.0"), "apply", "-f", "-")
	if err != nil {
		return err
	}
	if exit == 0 || !strings.Contains(denial, "denied") || !strings.Contains(denial, `"east"`) {
		return fmt.Errorf("west should deny the Component naming east as the holder; kubectl exit %d: %s", exit, denial)
	}
	w.proves("west does not hold the fence, so its admission webhook refuses every change to Components")

	w.title("kubectl apply --dry-run=server on west shows the same denial and persists nothing")
	dryDenial, exit, err := w.kubectl(ctx, west, fmt.Appendf(nil, componentYAML, "1.0.0"), "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		return err
	}
	if exit == 0 || !strings.Contains(dryDenial, `"east"`) {
		return fmt.Errorf("the dry run on west should be denied like the real request; kubectl exit %d: %s", exit, dryDenial)
	}
	stderr, exit, err = w.kubectl(ctx, west, nil, "get", "component", "billing", "-n", "default")
	if err != nil {
		return err
	}
	if exit == 0 || !strings.Contains(stderr, "NotFound") {
		return fmt.Errorf("west should have no Component after the refusals (exit %d): %s", exit, stderr)
	}
	w.proves("a dry run gets exactly the real decision, so a pipeline can check a change before making it")

	newEpoch := east.Epoch + 1
	w.title("fail over: raise west's epoch to %d (a rollout with a new flag value)", newEpoch)
	start := time.Now()
	if err := w.s.RolloutEpoch(ctx, west, newEpoch); err != nil {
		return err
	}
	fence, err = w.waitHolder(ctx, "west")
	if err != nil {
		return err
	}
	if fence.GetHolder().GetToken() <= eastToken {
		return fmt.Errorf("the fencing token went from %d to %d; it must grow when the fence changes hands", eastToken, fence.GetHolder().GetToken())
	}
	w.proves("west took the fence %s after its new epoch was rolled out; the token grew from %d to %d",
		time.Since(start).Round(10*time.Millisecond), eastToken, fence.GetHolder().GetToken())

	w.title("east is fenced, and its Components say so without anyone touching them")
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		res, err := east.ControlPlane.Kubectl(ctx, nil, "get", "component", "billing", "-n", "default",
			"-o", `jsonpath={.status.conditions[?(@.type=="SourceConflict")].reason} {.status.fence.holder}`)
		return err == nil && res.Stdout == fmt.Sprintf("ClusterFenced west@%d", newEpoch), nil
	})
	if err != nil {
		return fmt.Errorf("east's Component never showed SourceConflict=True (ClusterFenced) with holder west@%d", newEpoch)
	}
	if _, _, err := w.kubectl(ctx, east, nil, "get", "components", "-n", "default"); err != nil {
		return err
	}
	denial, exit, err = w.kubectl(ctx, east, fmt.Appendf(nil, componentYAML, "1.1.0"), "apply", "-f", "-")
	if err != nil {
		return err
	}
	if exit == 0 || !strings.Contains(denial, `"west"`) {
		return fmt.Errorf("east should now deny changes naming west as the holder; kubectl exit %d: %s", exit, denial)
	}
	w.proves("east stopped admitting before west was granted, and its controller re-marked every Component the moment the fence moved")

	w.title("west now admits the Component, stamped with epoch %d", newEpoch)
	if stderr, exit, err = w.kubectl(ctx, west, fmt.Appendf(nil, componentYAML, "1.1.0"), "apply", "-f", "-"); err != nil {
		return err
	}
	if exit != 0 {
		return fmt.Errorf("west should admit the Component now: %s", stderr)
	}
	epoch, err = annotation(ctx, west, "fencegate.dev/epoch")
	if err != nil {
		return err
	}
	if epoch != fmt.Sprint(newEpoch) {
		return fmt.Errorf("west's Component carries fencegate.dev/epoch=%q, want %d", epoch, newEpoch)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		res, err := west.ControlPlane.Kubectl(ctx, nil, "get", "component", "billing", "-n", "default",
			"-o", `jsonpath={.status.conditions[?(@.type=="SourceConflict")].status} {.status.conditions[?(@.type=="SourceConflict")].reason}`)
		return err == nil && res.Stdout == "False FenceHeld", nil
	})
	if err != nil {
		return errors.New("west's Component never showed SourceConflict=False (FenceHeld)")
	}
	if _, _, err := w.kubectl(ctx, west, nil, "get", "components", "-n", "default"); err != nil {
		return err
	}
	w.proves("only the cluster holding the fence can change Components, and its controller marks them FenceHeld")

	w.title("fencegate fence status shows the new holder")
	status, err := w.fenceStatus(ctx)
	if err != nil {
		return err
	}
	if !strings.Contains(status, "west") {
		return errors.New("fence status does not name west")
	}
	w.proves("the operator's view agrees: west holds the fence at epoch %d", newEpoch)
	return nil
}

// declared reports whether the authority has seen a declaration from the
// named cluster.
func declared(fence *fencev1.Fence, name string) bool {
	for _, c := range fence.GetClusters() {
		if c.GetClusterName() == name {
			return true
		}
	}
	return false
}

// conciseError keeps what a person needs of kubectl's error output: an
// apply that patches prints the whole patch before the webhook's answer.
func conciseError(stderr string) string {
	if i := strings.Index(stderr, "admission webhook"); i >= 0 && strings.HasPrefix(stderr, "Error from server (Forbidden)") {
		return "Error from server (Forbidden): " + stderr[i:]
	}
	return stderr
}
