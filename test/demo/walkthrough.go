package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
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

// fencegate runs the fencegate binary in the stack's directory, as an
// operator would with the files there (the kubeconfig of both clusters,
// the operator's certificate), and shows the command and what it printed.
func (w *walkthrough) fencegate(ctx context.Context, args ...string) (string, int, error) {
	fmt.Fprintf(w.out, "  $ fencegate %s\n", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, w.s.Binary, args...)
	cmd.Dir = w.s.Dir
	out, err := cmd.CombinedOutput()
	w.show(string(out))
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		return string(out), exitErr.ExitCode(), nil
	case err != nil:
		return "", 0, fmt.Errorf("fencegate %s: %w", args[0], err)
	}
	return string(out), 0, nil
}

// operator are the flags of a fence command as the operator, with the
// operator's certificate.
func (w *walkthrough) operator() []string {
	return []string{"--authority", w.s.AuthorityAddr, "--authority-ca", "pki/ca.crt", "--authority-cert", "pki/operator.crt", "--authority-key", "pki/operator.key"}
}

// fenceStatus shows `fencegate fence status`, as the operator runs it.
func (w *walkthrough) fenceStatus(ctx context.Context) (string, error) {
	out, exit, err := w.fencegate(ctx, append([]string{"fence", "status"}, w.operator()...)...)
	if err == nil && exit != 0 {
		err = fmt.Errorf("fencegate fence status exited %d", exit)
	}
	return out, err
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

// getFences shows `kubectl get fences` on both clusters and checks the
// state of each one's default domain and that it enforces it.
func (w *walkthrough) getFences(ctx context.Context, want map[*stack.Cluster]string) error {
	byDomain := map[*stack.Cluster]map[string]string{}
	for c, state := range want {
		byDomain[c] = map[string]string{"default": state}
	}
	return w.getFencesOf(ctx, byDomain)
}

// getFencesOf shows `kubectl get fences` on both clusters and checks, for
// each domain named, its Fence's state and that the cluster enforces it.
func (w *walkthrough) getFencesOf(ctx context.Context, want map[*stack.Cluster]map[string]string) error {
	for _, c := range []*stack.Cluster{w.s.Cluster("east"), w.s.Cluster("west")} {
		for d, state := range want[c] {
			var f fencegatev1alpha1.Fence
			err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
				if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: d}, &f); err != nil {
					return false, nil //nolint:nilerr // not written yet; keep polling
				}
				return f.Status.State == state && conditionTrue(&f, fencegatev1alpha1.ConditionEnforced), nil
			})
			if err != nil {
				return fmt.Errorf("%s's Fence of %s never said %s and Enforced (state %q)", c.Name, d, state, f.Status.State)
			}
		}
		if _, exit, err := w.kubectl(ctx, c, nil, "get", "fences", "-o", "wide"); err != nil || exit != 0 {
			return fmt.Errorf("kubectl get fences on %s: exit %d %w", c.Name, exit, err)
		}
	}
	return nil
}

func conditionTrue(f *fencegatev1alpha1.Fence, typ string) bool {
	for _, c := range f.Status.Conditions {
		if c.Type == typ {
			return c.Status == "True"
		}
	}
	return false
}

// componentRef is a Component to read or patch by its key.
func componentRef(key types.NamespacedName) *fencegatev1alpha1.Component {
	return &fencegatev1alpha1.Component{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
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

// pids are the process ids of every fencegate run, to tell that nothing
// restarted.
func (w *walkthrough) pids() map[string]int {
	m := map[string]int{}
	for _, c := range w.s.Clusters {
		for i, r := range c.Replicas {
			m[fmt.Sprintf("%s/%d", c.Name, i)] = r.Run.Pid()
		}
	}
	return m
}

func (w *walkthrough) run(ctx context.Context) error {
	east, west := w.s.Cluster("east"), w.s.Cluster("west")

	w.title("east declares epoch %d to the authority, over mTLS as %s, and holds the fence", east.Epoch, stack.ClusterIdentity("east"))
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

	w.title("each cluster's Fence object says where it stands")
	if err := w.getFences(ctx, map[*stack.Cluster]string{east: "active", west: "fenced"}); err != nil {
		return err
	}
	w.proves("kubectl shows the fence on each cluster: east holds it and enforces it (Holding, Enforced), west is fenced and enforces that")

	if err := w.holds(ctx, east, west); err != nil {
		return err
	}

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

	if err := w.impersonation(ctx, east); err != nil {
		return err
	}

	w.title("fencegate fence history, with the operator's certificate, lists the fence's changes")
	history, exit, err := w.fencegate(ctx, append([]string{"fence", "history"}, w.operator()...)...)
	if err != nil {
		return err
	}
	if exit != 0 || !strings.Contains(history, "granted") || strings.Contains(history, stack.ClusterIdentity("west")) {
		return fmt.Errorf("fence history (exit %d) should show east's grant and nothing by west's identity:\n%s", exit, history)
	}
	w.proves("the history holds the real changes; the refused call is counted and logged but, by design, not stored there: a caller that may not act leaves no mark in the record")

	newEpoch := east.Epoch + 1
	w.title("fail over to west with one command: it raises west's spec.epoch to %d and waits until the move is enforced", newEpoch)
	before := w.pids()
	out, exit, err := w.fencegate(ctx, "failover", "--kubeconfig", "kubeconfig", "--to", "west", "--from", "east", "--wait")
	if err != nil {
		return err
	}
	if exit != 0 || !strings.Contains(out, "failover complete in") || !strings.Contains(out, "old holder quiesced") {
		return fmt.Errorf("fencegate failover exited %d, or did not wait for east to quiesce", exit)
	}
	fence, err = w.waitHolder(ctx, "west")
	if err != nil {
		return err
	}
	if fence.GetHolder().GetToken() <= eastToken {
		return fmt.Errorf("the fencing token went from %d to %d; it must grow when the fence changes hands", eastToken, fence.GetHolder().GetToken())
	}
	if after := w.pids(); fmt.Sprint(after) != fmt.Sprint(before) {
		return fmt.Errorf("fencegate processes restarted during the failover: %v, then %v", before, after)
	}
	w.proves("west holds the fence at epoch %d (token %d, up from %d) and every replica on both sides enforces the move; no process restarted", newEpoch, fence.GetHolder().GetToken(), eastToken)

	w.title("the Fences say so on both clusters")
	if err := w.getFences(ctx, map[*stack.Cluster]string{east: "fenced", west: "active"}); err != nil {
		return err
	}
	w.proves("west is Holding and Enforced; east is fenced (ClusterFenced) and Enforced")

	if err := w.holdsSwapped(ctx, east, west); err != nil {
		return err
	}

	w.title("east's Components say it is fenced, without anyone touching them, and east refuses changes")
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

	backEpoch := newEpoch + 1
	w.title("fail back to east: the same command, the other way, raises east's spec.epoch to %d", backEpoch)
	out, exit, err = w.fencegate(ctx, "failover", "--kubeconfig", "kubeconfig", "--to", "east", "--from", "west", "--wait")
	if err != nil {
		return err
	}
	if exit != 0 || !strings.Contains(out, "failover complete in") {
		return fmt.Errorf("fencegate failover back to east exited %d", exit)
	}
	if err := w.getFences(ctx, map[*stack.Cluster]string{east: "active", west: "fenced"}); err != nil {
		return err
	}
	if after := w.pids(); fmt.Sprint(after) != fmt.Sprint(before) {
		return fmt.Errorf("fencegate processes restarted during the failback: %v, then %v", before, after)
	}
	w.proves("east holds the fence again at epoch %d; the Helm or flag epoch stays the floor, spec.epoch only rises", backEpoch)

	w.title("fencegate fence status shows the holder")
	status, err := w.fenceStatus(ctx)
	if err != nil {
		return err
	}
	if !strings.Contains(status, "east") || !strings.Contains(status, fmt.Sprint(backEpoch)) {
		return errors.New("fence status does not name east at the epoch of the failback")
	}
	w.proves("the operator's view agrees: east holds the fence at epoch %d", backEpoch)
	return w.activeActive(ctx)
}

// impersonation shows west's identity refused when it declares as east, the
// authority's counter and log line of the refusal.
func (w *walkthrough) impersonation(ctx context.Context, east *stack.Cluster) error {
	west := w.s.PKI.Cluster("west")
	w.title("west's identity declares as east: the authority refuses it, whatever the epoch")
	uid, err := east.ControlPlane.KubeSystemUID(ctx)
	if err != nil {
		return err
	}
	cfg, err := w.s.PKI.TLS(west)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(w.s.AuthorityAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return fmt.Errorf("connect to the authority as west: %w", err)
	}
	defer func() { _ = conn.Close() }()
	req := &fencev1.DeclareClusterEpochRequest{Domain: "default", ClusterName: "east", ClusterUid: uid, Epoch: east.Epoch + 10}
	fmt.Fprintf(w.out, "  $ DeclareClusterEpoch cluster_name=east cluster_uid=%s epoch=%d   # with west's certificate (%s)\n", uid, req.Epoch, west.Identity)
	_, err = fencev1.NewFenceServiceClient(conn).DeclareClusterEpoch(ctx, req)
	st, _ := status.FromError(err)
	w.show(fmt.Sprintf("%s: %s", st.Code(), st.Message()))
	if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), west.Identity) {
		return fmt.Errorf("west's identity declaring as east should be refused with PermissionDenied naming it, got %w", err)
	}

	fmt.Fprintf(w.out, "  $ curl -s http://%s/metrics | grep fencegate_authority_permission_denied_total\n", w.s.AuthorityMetricsAddress())
	counter, err := w.authorityMetric(ctx, "fencegate_authority_permission_denied_total")
	if err != nil {
		return err
	}
	w.show(counter)
	if !strings.Contains(counter, `method="DeclareClusterEpoch"`) {
		return fmt.Errorf("the authority counted no refused DeclareClusterEpoch: %q", counter)
	}
	fmt.Fprintf(w.out, "  $ grep 'call refused' %s\n", filepath.Base(w.s.Authority.LogPath))
	line, err := grepLine(w.s.Authority.LogPath, "call refused", west.Identity)
	if err != nil {
		return err
	}
	w.show(line)
	w.proves("an identity acts only as the cluster it is bound to: west's certificate cannot declare, release or hold as east, and the authority counts and logs every refusal")
	return nil
}

// authorityMetric returns the lines of one metric on the authority's
// /metrics.
func (w *walkthrough) authorityMetric(ctx context.Context, name string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+w.s.AuthorityMetricsAddress()+"/metrics", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("scrape the authority: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), name) {
			lines = append(lines, sc.Text())
		}
	}
	return strings.Join(lines, "\n"), sc.Err()
}

// grepLine returns the first line of a file that holds every one of words.
func grepLine(path string, words ...string) (string, error) {
	// The authority writes the line as it refuses: wait for it.
	var found string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		for line := range strings.Lines(string(raw)) {
			if containsAll(line, words) {
				found = strings.TrimSpace(line)
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		return "", fmt.Errorf("no line with %q in %s: %w", words, path, err)
	}
	return found, nil
}

func containsAll(s string, words []string) bool {
	for _, w := range words {
		if !strings.Contains(s, w) {
			return false
		}
	}
	return true
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
