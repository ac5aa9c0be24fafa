package charts

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/node"
	"github.com/fencegate/fencegate/test/stack"
)

const (
	// nodeImageTag tags the fencegate image the node test builds.
	nodeImageTag = "node-test"
	// authorityRelease is also the authority's Service name.
	authorityRelease   = "fencegate-authority"
	authorityNamespace = "fencegate-authority"
	fencegateRelease   = "fencegate"
	// denial is in every message of a fenced cluster's webhook.
	denial = "does not hold the ownership fence"
)

// TestChartsOnARealNode installs both charts with `helm install --wait` on a
// one-node cluster (test/node) whose pods run the fencegate image built from
// this checkout, runs `helm test`, fails the fence over from a second
// cluster (the process stack, declaring to the authority that runs in the
// node's cluster) with `helm upgrade --set epoch=2` while both clusters keep
// writing, and checks what only running pods show: the read-only root
// filesystem with writable certificate directories, the probes' ports, the
// chart's FlowSchema and priority level carrying fencegate's requests
// (apiserver_flowcontrol_dispatched_requests_total grows through the
// failover), the RBAC of everything `fencegate run` does, the drain on
// SIGTERM within the grace period, memory against the requests, and a node
// drain held by the PodDisruptionBudget. The subtests run in order on one
// node.
func TestChartsOnARealNode(t *testing.T) {
	h := newHelm(t)
	dir := t.TempDir()
	ctx := t.Context()

	buildStart := time.Now()
	image := filepath.Join(dir, "fencegate-image.tar")
	cmd := exec.CommandContext(ctx, filepath.Join(h.root, "hack", "image.sh"), image)
	cmd.Env = append(os.Environ(), "VERSION="+nodeImageTag)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image.sh: %v\n%s", err, out)
	}
	t.Logf("fencegate image built in %s", time.Since(buildStart).Round(time.Second))

	n := node.StartForTest(t, node.Options{Name: "west", Dir: dir, Images: []string{image}})
	t.Cleanup(func() {
		if t.Failed() {
			tailLogs(t, dir)
		}
	})
	w := &nodeTest{t: t, h: h, n: n, dir: dir}

	w.installAuthority(ctx)
	east := w.startEast(ctx)
	w.installFencegate(ctx)

	t.Run("helm test passes while fenced", func(t *testing.T) {
		w.helmTest(ctx, t, "PASS: west is fenced")
	})
	// fencegate's requests, the status writes of a failover's re-marking
	// among them, go through the chart's FlowSchema and priority level.
	var dispatched float64
	t.Run("the chart's FlowSchema and priority level take fencegate's requests", func(t *testing.T) {
		dispatched = wantTheChartsPriorityLevel(t, n.ControlPlane, fencegateRelease)
	})
	t.Run("west's pods deny through the webhook Service and east admits", func(t *testing.T) {
		res := w.kubectl(ctx, t, n.ControlPlane, component("denied-on-west", "1"), "apply", "-f", "-")
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, `admission webhook "mutate.fencegate.dev" denied the request`) || !strings.Contains(res.Stderr, denial) {
			t.Fatalf("a fenced west must deny through its webhook, got exit %d:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		w.wantStamped(ctx, t, east.ControlPlane, "admitted-on-east", "1")
	})
	t.Run("helm upgrade --set epoch=2 fails over while both sides write", func(t *testing.T) {
		w.failOver(ctx, t, east)
	})
	t.Run("west's pods admit and stamp a Component created with kubectl", func(t *testing.T) {
		// Once every pod holds the fence, a write on west is admitted.
		w.waitDeploymentReady(ctx, t)
		w.waitInstances(ctx, t, "west", w.fencegatePods(ctx, t), time.Minute)
		w.wantStamped(ctx, t, n.ControlPlane, "stamped-on-west", "2")
		res := w.kubectl(ctx, t, east.ControlPlane, component("denied-on-east", "1"), "apply", "-f", "-")
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, denial) {
			t.Fatalf("a fenced east must deny, got exit %d:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
		}
		w.helmTest(ctx, t, "PASS: west is active")
	})
	t.Run("the failover's requests went through the chart's priority level", func(t *testing.T) {
		if after := wantTheChartsPriorityLevel(t, n.ControlPlane, fencegateRelease); after <= dispatched {
			t.Errorf("the API server dispatched %v requests through FlowSchema and priority level %s after the failover, %v before it: want more", after, fencegateRelease, dispatched)
		}
	})
	t.Run("root filesystem read-only, certificate and data directories writable", func(t *testing.T) {
		for _, p := range append(w.fencegatePods(ctx, t), w.authorityPod(ctx, t)) {
			w.wantMounts(ctx, t, p)
		}
	})
	t.Run("probes on the ports the processes serve", func(t *testing.T) {
		for _, p := range append(w.fencegatePods(ctx, t), w.authorityPod(ctx, t)) {
			w.wantProbes(ctx, t, p)
		}
	})
	t.Run("RBAC covers everything fencegate run does", func(t *testing.T) {
		w.wantRBAC(ctx, t)
	})
	t.Run("memory requests fit the measured RSS", func(t *testing.T) {
		for _, p := range append(w.fencegatePods(ctx, t), w.authorityPod(ctx, t)) {
			w.wantMemoryFits(ctx, t, p)
		}
	})
	t.Run("SIGTERM drains within terminationGracePeriodSeconds", func(t *testing.T) {
		w.wantDrainOnSIGTERM(ctx, t, w.fencegatePods(ctx, t)[0])
	})
	t.Run("kubectl drain respects the PodDisruptionBudget", func(t *testing.T) {
		w.wantDrainHeldByPDB(ctx, t)
	})
}

// nodeTest holds what the steps of TestChartsOnARealNode share.
type nodeTest struct {
	t             *testing.T
	h             *helmTool
	n             *node.Node
	dir           string
	authorityAddr string
	fence         fencev1.FenceServiceClient
}

// helm runs helm against the node's cluster.
func (w *nodeTest) helm(ctx context.Context, t *testing.T, args ...string) string {
	t.Helper()
	out, err := w.h.runWithin(ctx, 5*time.Minute, append([]string{"--kubeconfig", w.n.Kubeconfig}, args...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return out
}

// imageValues point a chart at the fencegate image imported into the node.
func imageValues() []string {
	return []string{
		"--set", "image.repository=fencegate.local/fencegate",
		"--set", "image.tag=" + nodeImageTag,
		"--set", "image.pullPolicy=Never",
	}
}

// testImageValues point the fencegate chart's `helm test` pod at the
// node's kubectl and busybox images.
func testImageValues() []string {
	kubectlRepo, kubectlTag, _ := strings.Cut(node.KubectlImage, ":")
	shellRepo, shellTag, _ := strings.Cut(node.ShellImage, ":")
	return []string{
		"--set", "test.kubectlImage.repository=" + kubectlRepo,
		"--set", "test.kubectlImage.tag=" + kubectlTag,
		"--set", "test.shellImage.repository=" + shellRepo,
		"--set", "test.shellImage.tag=" + shellTag,
	}
}

// installAuthority installs the authority chart with its embedded etcd on
// a static hostPath volume, and finds its Service's address.
func (w *nodeTest) installAuthority(ctx context.Context) {
	t := w.t
	// The volume's directory belongs to the pod's user, as a provisioner
	// would make it: fsGroup does not apply to hostPath volumes.
	data := filepath.Join(w.dir, "authority-volume")
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(data, 65532, 65532); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: "authority-data"},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: data},
			},
		},
	}
	if err := w.n.Client.Create(ctx, pv); err != nil {
		t.Fatalf("create the authority's volume: %v", err)
	}
	start := time.Now()
	w.helm(ctx, t, append([]string{"install", authorityRelease, w.h.chartDir(authorityChart),
		"--namespace", authorityNamespace, "--create-namespace", "--wait", "--timeout", "4m",
		// A lab authority: plaintext, and every caller may make every
		// call (the chart needs that said).
		"--set", "insecure=true", "--set", "authorization.none=true"}, imageValues()...)...)
	t.Logf("helm install --wait of fencegate-authority took %s", time.Since(start).Round(time.Second))
	w.logStartToReady(ctx, authorityNamespace)

	var svc corev1.Service
	if err := w.n.Client.Get(ctx, client.ObjectKey{Namespace: authorityNamespace, Name: authorityRelease}, &svc); err != nil {
		t.Fatalf("the authority's Service: %v", err)
	}
	w.authorityAddr = svc.Spec.ClusterIP + ":7443"
}

// startEast starts the second cluster, a process stack whose fencegate
// declares to the authority in the node's cluster (over its ClusterIP,
// which the host routes to the node) before west does, so east holds.
func (w *nodeTest) startEast(ctx context.Context) *stack.Cluster {
	t := w.t
	bin, err := stack.Build(ctx, w.dir)
	if err != nil {
		t.Fatal(err)
	}
	eastDir := filepath.Join(w.dir, "east")
	st, err := stack.Start(ctx, stack.Options{
		Binary: bin, Dir: eastDir, Authority: w.authorityAddr,
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1}},
		Say:      t.Logf,
	})
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stop east: %v", err)
		}
	})
	if err != nil {
		t.Fatalf("east: %v", err)
	}
	w.fence = st.Fence
	w.waitHolder(ctx, t, "east", 1, time.Minute)
	return st.Cluster("east")
}

// installFencegate installs the fencegate chart on west at epoch 1, with
// self-signed webhook certificates and the default two replicas.
func (w *nodeTest) installFencegate(ctx context.Context) {
	t := w.t
	start := time.Now()
	w.helm(ctx, t, append([]string{"install", fencegateRelease, w.h.chartDir(fencegateChart),
		"--namespace", namespace, "--create-namespace", "--wait", "--timeout", "4m",
		"--set", "clusterName=west", "--set", "epoch=1",
		"--set", "authority.address=" + w.authorityAddr, "--set", "authority.insecure=true"},
		append(imageValues(), testImageValues()...)...)...)
	t.Logf("helm install --wait of fencegate took %s", time.Since(start).Round(time.Second))
	w.logStartToReady(ctx, namespace)
	if pods := w.fencegatePods(ctx, t); len(pods) != 2 {
		t.Fatalf("want the default 2 fencegate replicas, have %d", len(pods))
	}
}

// logStartToReady reports, for each pod of a namespace, how long it took
// from its creation to Ready.
func (w *nodeTest) logStartToReady(ctx context.Context, ns string) {
	var pods corev1.PodList
	if err := w.n.Client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		w.t.Fatalf("list pods in %s: %v", ns, err)
	}
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				w.t.Logf("pod %s/%s: created to Ready in %s", ns, p.Name, c.LastTransitionTime.Sub(p.CreationTimestamp.Time))
			}
		}
	}
}

// helmTest runs `helm test` and wants its log to say want.
func (w *nodeTest) helmTest(ctx context.Context, t *testing.T, want string) {
	t.Helper()
	out := w.helm(ctx, t, "test", fencegateRelease, "--namespace", namespace, "--logs", "--timeout", "3m")
	if !strings.Contains(out, want) {
		t.Fatalf("helm test: want %q in its output:\n%s", want, out)
	}
}

// kubectl runs kubectl against a cluster.
func (w *nodeTest) kubectl(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, stdin []byte, args ...string) cluster.KubectlResult {
	t.Helper()
	res, err := cp.Kubectl(ctx, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// component is a Component manifest in the default namespace; value
// changes an annotation, so that applying it again is an update.
func component(name, value string) []byte {
	return fmt.Appendf(nil, `apiVersion: components.fencegate.dev/v1alpha1
kind: Component
metadata:
  name: %s
  namespace: default
  annotations:
    test.fencegate.dev/write: %q
spec:
  enabled: false
`, name, value)
}

// wantStamped creates a Component with kubectl and wants it admitted and
// stamped with epoch and a fencing token.
func (w *nodeTest) wantStamped(ctx context.Context, t *testing.T, cp *cluster.ControlPlane, name, epoch string) {
	t.Helper()
	res := w.kubectl(ctx, t, cp, component(name, "1"), "apply", "-f", "-")
	if res.ExitCode != 0 {
		t.Fatalf("create Component %s on %s: exit %d\n%s%s", name, cp.Name, res.ExitCode, res.Stdout, res.Stderr)
	}
	var c fencegatev1alpha1.Component
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &c); err != nil {
		t.Fatal(err)
	}
	if got := c.Annotations["fencegate.dev/epoch"]; got != epoch || c.Annotations["fencegate.dev/token"] == "" {
		t.Fatalf("Component %s on %s: want stamped with epoch %s and a token, has annotations %v", name, cp.Name, epoch, c.Annotations)
	}
}

// waitHolder waits until the authority says cluster holds the fence at
// epoch, and returns when it first saw that.
func (w *nodeTest) waitHolder(ctx context.Context, t *testing.T, cluster string, epoch uint64, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	var last string
	for time.Now().Before(deadline) {
		resp, err := w.fence.GetFence(ctx, &fencev1.GetFenceRequest{})
		if err == nil {
			h := resp.GetFence().GetHolder()
			if h.GetClusterName() == cluster && h.GetEpoch() == epoch && !h.GetReleased() {
				return time.Now()
			}
			last = fmt.Sprintf("holder %q at epoch %d (released %t)", h.GetClusterName(), h.GetEpoch(), h.GetReleased())
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s does not hold the fence at epoch %d after %s: %s", cluster, epoch, limit, last)
	return time.Time{}
}

// waitInstances waits until every pod is an instance of the holder, cluster,
// with a lease it has not released.
func (w *nodeTest) waitInstances(ctx context.Context, t *testing.T, cluster string, pods []corev1.Pod, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	var have []string
	var holder string
	for time.Now().Before(deadline) {
		resp, err := w.fence.GetFence(ctx, &fencev1.GetFenceRequest{})
		if err != nil {
			t.Fatal(err)
		}
		h := resp.GetFence().GetHolder()
		holder = fmt.Sprintf("holder %q at epoch %d", h.GetClusterName(), h.GetEpoch())
		have = nil
		for _, in := range h.GetInstances() {
			if !in.GetReleased() {
				have = append(have, in.GetInstance())
			}
		}
		if h.GetClusterName() == cluster && !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return !slices.Contains(have, p.Name) }) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("after %s, %s's pods are not all instances of the holder (%s): %v", limit, cluster, holder, have)
}

// write is one write of a writer loop: when it ran and what came of it.
type write struct {
	start, end time.Time
	outcome    string // admitted, denied (by fencegate) or unavailable
	stamped    bool   // admitted with fencegate.dev/epoch
	detail     string
}

// writeLoop applies the same Component on a cluster again and again, with a
// new annotation value each time, until ctx ends.
func (w *nodeTest) writeLoop(ctx context.Context, cp *cluster.ControlPlane) []write {
	var writes []write
	for i := 0; ctx.Err() == nil; i++ {
		start := time.Now()
		res, err := cp.Kubectl(context.WithoutCancel(ctx), component("loop", strconv.Itoa(i)), "apply", "-f", "-",
			"--request-timeout", "10s", "-o", `jsonpath={.metadata.annotations.fencegate\.dev/epoch}`)
		wr := write{start: start, end: time.Now()}
		switch {
		case err != nil:
			wr.outcome, wr.detail = "unavailable", err.Error()
		case res.ExitCode == 0:
			wr.outcome, wr.stamped = "admitted", res.Stdout != ""
		case strings.Contains(res.Stderr, "denied the request: fencegate: "):
			// The fence's answer: not the holder, or (old pods during
			// the rollout) an epoch the authority refuses.
			wr.outcome, wr.detail = "denied", strings.TrimSpace(res.Stderr)
		default:
			wr.outcome, wr.detail = "unavailable", strings.TrimSpace(res.Stderr)
		}
		writes = append(writes, wr)
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	return writes
}

// failOver raises west's epoch with helm upgrade while both clusters write,
// and checks that the fence moved to west without both sides admitting at
// once; it reports how long west took to hold the fence and how long its
// admission was unavailable during the rollout.
func (w *nodeTest) failOver(ctx context.Context, t *testing.T, east *stack.Cluster) {
	loopCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var eastWrites, westWrites []write
	wg.Go(func() { eastWrites = w.writeLoop(loopCtx, east.ControlPlane) })
	wg.Go(func() { westWrites = w.writeLoop(loopCtx, w.n.ControlPlane) })
	time.Sleep(2 * time.Second)

	upgrade := time.Now()
	held := make(chan time.Time, 1)
	go func() { held <- w.waitHolder(ctx, t, "west", 2, 3*time.Minute) }()
	w.helm(ctx, t, "upgrade", fencegateRelease, w.h.chartDir(fencegateChart), "--namespace", namespace,
		"--reuse-values", "--set", "epoch=2", "--wait", "--timeout", "4m")
	rolledOut := time.Since(upgrade)
	heldAt := <-held
	// Let both sides write until the old pods are gone.
	w.waitDeploymentReady(ctx, t)
	time.Sleep(2 * time.Second)
	stop()
	wg.Wait()

	t.Logf("helm upgrade --wait took %s; west held the fence %s after the upgrade began",
		rolledOut.Round(100*time.Millisecond), heldAt.Sub(upgrade).Round(100*time.Millisecond))
	unavailable, longest, count := unavailability(westWrites)
	t.Logf("west's admission was unavailable for %s in all (%d failed writes, longest gap %s) during the rollout",
		unavailable.Round(100*time.Millisecond), count, longest.Round(100*time.Millisecond))
	for _, side := range []struct {
		name   string
		writes []write
	}{{"east", eastWrites}, {"west", westWrites}} {
		t.Logf("%s's writes, from the start of the upgrade:\n%s", side.name, timeline(side.writes, upgrade))
	}

	// Mutation and validation may reach two pods that do not agree on the
	// fence; both deny what they do not admit, so every admitted write
	// carries the fencing token, also during the rollout.
	for _, side := range []struct {
		name   string
		writes []write
	}{{"east", eastWrites}, {"west", westWrites}} {
		if i := slices.IndexFunc(side.writes, func(wr write) bool { return wr.outcome == "admitted" && !wr.stamped }); i >= 0 {
			t.Errorf("%s admitted a write without the epoch stamp, %s after the upgrade began", side.name, side.writes[i].end.Sub(upgrade).Round(100*time.Millisecond))
		}
	}
	if first := slices.IndexFunc(westWrites, func(wr write) bool { return wr.outcome == "admitted" }); first >= 0 {
		t.Logf("west's first write admitted %s after the upgrade began", westWrites[first].end.Sub(upgrade).Round(100*time.Millisecond))
	}
	lastEast, firstWest := time.Time{}, time.Time{}
	for _, wr := range eastWrites {
		if wr.outcome == "admitted" && wr.start.After(lastEast) {
			lastEast = wr.start
		}
	}
	for _, wr := range westWrites {
		if wr.outcome == "admitted" && (firstWest.IsZero() || wr.end.Before(firstWest)) {
			firstWest = wr.end
		}
	}
	switch {
	case lastEast.IsZero():
		t.Fatalf("east admitted none of its %d writes before the failover", len(eastWrites))
	case firstWest.IsZero():
		t.Fatalf("west admitted none of its %d writes after the failover: %s", len(westWrites), outcomes(westWrites))
	case !lastEast.Before(firstWest):
		t.Fatalf("both clusters admitted at once: east admitted a write that began %s after west's first admission ended",
			lastEast.Sub(firstWest))
	}
	if last := eastWrites[len(eastWrites)-1]; last.outcome != "denied" {
		t.Errorf("east's last write after the failover was %s, want denied: %s", last.outcome, last.detail)
	}
	t.Logf("east: %s; west: %s", outcomes(eastWrites), outcomes(westWrites))
}

// timeline groups consecutive writes with the same outcome, one line each.
func timeline(writes []write, since time.Time) string {
	var b strings.Builder
	for i := 0; i < len(writes); {
		j := i
		key := func(wr write) string {
			return fmt.Sprintf("%s %t %.160s", wr.outcome, wr.stamped, wr.detail)
		}
		for j < len(writes) && key(writes[j]) == key(writes[i]) {
			j++
		}
		wr := writes[i]
		what := wr.outcome
		if wr.outcome == "admitted" && !wr.stamped {
			what = "admitted without the epoch stamp"
		}
		fmt.Fprintf(&b, "  %+.1fs to %+.1fs: %d %s", wr.start.Sub(since).Seconds(), writes[j-1].end.Sub(since).Seconds(), j-i, what)
		if wr.detail != "" {
			fmt.Fprintf(&b, ": %.160s", wr.detail)
		}
		b.WriteString("\n")
		i = j
	}
	return b.String()
}

// unavailability sums the time from each write that failed for a reason
// other than the fence to the next write that got an answer.
func unavailability(writes []write) (total, longest time.Duration, count int) {
	var since time.Time
	for _, wr := range writes {
		if wr.outcome == "unavailable" {
			count++
			if since.IsZero() {
				since = wr.start
			}
			continue
		}
		if !since.IsZero() {
			gap := wr.start.Sub(since)
			total += gap
			longest = max(longest, gap)
			since = time.Time{}
		}
	}
	return total, longest, count
}

// outcomes counts writes by outcome.
func outcomes(writes []write) string {
	counts := map[string]int{}
	for _, wr := range writes {
		counts[wr.outcome]++
		if wr.outcome == "admitted" && !wr.stamped {
			counts["unstamped"]++
		}
	}
	return fmt.Sprintf("%d admitted (%d of them unstamped), %d denied, %d unavailable",
		counts["admitted"], counts["unstamped"], counts["denied"], counts["unavailable"])
}

// fencegatePods are the running pods of the fencegate Deployment.
func (w *nodeTest) fencegatePods(ctx context.Context, t *testing.T) []corev1.Pod {
	t.Helper()
	return w.runningPods(ctx, t, namespace, client.MatchingLabels{"app.kubernetes.io/name": "fencegate", "app.kubernetes.io/instance": fencegateRelease})
}

// authorityPod is the authority StatefulSet's pod.
func (w *nodeTest) authorityPod(ctx context.Context, t *testing.T) corev1.Pod {
	t.Helper()
	pods := w.runningPods(ctx, t, authorityNamespace, client.MatchingLabels{"app.kubernetes.io/instance": authorityRelease})
	if len(pods) != 1 {
		t.Fatalf("want one authority pod, have %d", len(pods))
	}
	return pods[0]
}

func (w *nodeTest) runningPods(ctx context.Context, t *testing.T, ns string, labels client.MatchingLabels) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := w.n.Client.List(ctx, &list, client.InNamespace(ns), labels); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			pods = append(pods, p)
		}
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return pods
}

// containerID is the ID of a pod's first container.
func containerID(t *testing.T, p corev1.Pod) string {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].ContainerID == "" {
		t.Fatalf("pod %s has no running container", p.Name)
	}
	return p.Status.ContainerStatuses[0].ContainerID
}

// wantMounts reads the container's mounts: / must be read-only and every
// volume the container writes to (the webhook's certificates, the
// authority's data) writable, which the pod's readiness already relied on.
func (w *nodeTest) wantMounts(ctx context.Context, t *testing.T, p corev1.Pod) {
	t.Helper()
	raw, err := w.n.ContainerFile(ctx, containerID(t, p), "mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	options := map[string]string{}
	for line := range strings.Lines(string(raw)) {
		// id parent major:minor root mount-point options ...
		if f := strings.Fields(line); len(f) > 5 {
			options[f[4]] = f[5]
		}
	}
	want := map[string]string{"/": "ro"}
	for _, m := range p.Spec.Containers[0].VolumeMounts {
		if m.ReadOnly {
			want[m.MountPath] = "ro"
		} else if !strings.HasPrefix(m.MountPath, "/var/run/secrets/") {
			want[m.MountPath] = "rw"
		}
	}
	for path, mode := range want {
		got, ok := options[path]
		if !ok {
			t.Errorf("pod %s: %s is not mounted", p.Name, path)
			continue
		}
		if !slices.Contains(strings.Split(got, ","), mode) {
			t.Errorf("pod %s: %s is mounted %s, want %s", p.Name, path, got, mode)
		}
	}
	t.Logf("pod %s: mounts %v", p.Name, want)
}

// wantProbes calls, through the API server's pod proxy, each probe's path
// on the port the probe names: the process must answer 200 there, and the
// pod must never have been restarted by its liveness probe.
func (w *nodeTest) wantProbes(ctx context.Context, t *testing.T, p corev1.Pod) {
	t.Helper()
	c := p.Spec.Containers[0]
	for name, probe := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("pod %s: no HTTP %s probe", p.Name, name)
			continue
		}
		port := portNumber(c, probe.HTTPGet.Port)
		if port == 0 {
			t.Errorf("pod %s: the %s probe's port %s is not a port of the container", p.Name, name, probe.HTTPGet.Port.String())
			continue
		}
		path := fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy%s", p.Namespace, p.Name, port, probe.HTTPGet.Path)
		res := w.kubectl(ctx, t, w.n.ControlPlane, nil, "get", "--raw", path)
		if res.ExitCode != 0 {
			t.Errorf("pod %s: %s probe GET %s on port %d: %s", p.Name, name, probe.HTTPGet.Path, port, res.Stderr)
		}
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.RestartCount != 0 {
			t.Errorf("pod %s: container %s restarted %d times", p.Name, s.Name, s.RestartCount)
		}
	}
	// The metrics port serves the project's metrics.
	port := portNumber(c, intstr.FromString("metrics"))
	res := w.kubectl(ctx, t, w.n.ControlPlane, nil, "get", "--raw", fmt.Sprintf("/api/v1/namespaces/%s/pods/%s:%d/proxy/metrics", p.Namespace, p.Name, port))
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "fencegate_") {
		t.Errorf("pod %s: no fencegate_ metrics on port %d: %s", p.Name, port, res.Stderr)
	}
}

// portNumber resolves a probe's port (a number or a port name).
func portNumber(c corev1.Container, port intstr.IntOrString) int32 {
	if port.Type == intstr.Int {
		return port.IntVal
	}
	for _, p := range c.Ports {
		if p.Name == port.StrVal {
			return p.ContainerPort
		}
	}
	return 0
}

// wantRBAC checks the effects of every API call `fencegate run` makes with
// the chart's service account, and that none was forbidden.
func (w *nodeTest) wantRBAC(ctx context.Context, t *testing.T) {
	cl := w.n.Client
	// kube-system read: the cluster declared with its kube-system UID.
	uid, err := w.n.KubeSystemUID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := w.fence.GetFence(ctx, &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetFence().GetHolder().GetClusterUid(); got != uid {
		t.Errorf("west holds the fence as cluster UID %q, want its kube-system UID %q", got, uid)
	}
	// Leader election Lease.
	// A leader that stopped released it; a new one takes it within its
	// retry period.
	for deadline := time.Now().Add(time.Minute); ; {
		var lease coordinationv1.Lease
		err := cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fencegateRelease + "-controller"}, &lease)
		holder := ptr.Deref(lease.Spec.HolderIdentity, "")
		if err == nil && slices.ContainsFunc(w.fencegatePods(ctx, t), func(p corev1.Pod) bool { return strings.HasPrefix(holder, p.Name) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("leader election Lease held by %q (err %v), want a running fencegate pod", holder, err)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Components and their status: the controller marks every one.
	deadline := time.Now().Add(time.Minute)
	for {
		var list fencegatev1alpha1.ComponentList
		err := cl.List(ctx, &list, client.InNamespace("default"))
		unmarked := []string{}
		for _, c := range list.Items {
			if len(c.Status.Conditions) == 0 {
				unmarked = append(unmarked, c.Name)
			}
		}
		if err == nil && len(list.Items) > 0 && len(unmarked) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("after a minute, west's controller has not marked Components %v of %d (err %v)", unmarked, len(list.Items), err)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// Events.
	var events corev1.EventList
	if err := cl.List(ctx, &events, client.InNamespace(namespace)); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return e.InvolvedObject.Kind == "Lease" }) {
		t.Errorf("no Event of the leader election in %s", namespace)
	}
	// The webhook Secret and the configurations' CA bundle.
	var secret corev1.Secret
	if err := cl.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fencegateRelease + "-webhook-tls"}, &secret); err != nil {
		t.Errorf("webhook Secret: %v", err)
	} else if len(secret.Data["tls.crt"]) == 0 {
		t.Errorf("webhook Secret has no tls.crt: keys %v", slices.Sorted(maps.Keys(secret.Data)))
	}
	for _, kind := range []string{"validatingwebhookconfiguration", "mutatingwebhookconfiguration"} {
		res := w.kubectl(ctx, t, w.n.ControlPlane, nil, "get", kind, fencegateRelease, "-o", "jsonpath={.webhooks[0].clientConfig.caBundle}")
		if res.ExitCode != 0 || res.Stdout == "" {
			t.Errorf("%s %s has no injected caBundle: %s", kind, fencegateRelease, res.Stderr)
		}
	}
	// Nothing was forbidden.
	for _, p := range w.fencegatePods(ctx, t) {
		res := w.kubectl(ctx, t, w.n.ControlPlane, nil, "logs", "--namespace", namespace, p.Name)
		if res.ExitCode != 0 {
			t.Errorf("logs of %s: %s", p.Name, res.Stderr)
		}
		for line := range strings.Lines(res.Stdout) {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				t.Errorf("pod %s was refused an API call: %s", p.Name, line)
			}
		}
	}
}

// wantMemoryFits reads the container process's resident memory, now and at
// its peak, and wants the peak within the container's memory request.
func (w *nodeTest) wantMemoryFits(ctx context.Context, t *testing.T, p corev1.Pod) {
	t.Helper()
	raw, err := w.n.ContainerFile(ctx, containerID(t, p), "status")
	if err != nil {
		t.Fatal(err)
	}
	kib := map[string]int64{}
	for line := range strings.Lines(string(raw)) {
		k, v, ok := strings.Cut(line, ":")
		if ok && (k == "VmRSS" || k == "VmHWM") {
			kib[k], _ = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	request := p.Spec.Containers[0].Resources.Requests.Memory()
	limit := p.Spec.Containers[0].Resources.Limits.Memory()
	t.Logf("pod %s: RSS %d MiB, peak %d MiB; requests %s, limit %s", p.Name, kib["VmRSS"]>>10, kib["VmHWM"]>>10, request, limit)
	if kib["VmHWM"] == 0 {
		t.Fatalf("pod %s: no VmHWM in /proc/<pid>/status:\n%s", p.Name, raw)
	}
	if peak := kib["VmHWM"] << 10; peak > request.Value() {
		t.Errorf("pod %s: peak RSS %d MiB is above its memory request %s", p.Name, peak>>20, request)
	}
}

// wantDrainOnSIGTERM deletes a fencegate pod and watches it: its container
// must exit 0 (drained on SIGTERM, not killed) before the grace period ends.
func (w *nodeTest) wantDrainOnSIGTERM(ctx context.Context, t *testing.T, p corev1.Pod) {
	grace := time.Duration(*p.Spec.TerminationGracePeriodSeconds) * time.Second
	// A watch sees the container's exit, which the pod's status shows only
	// for a moment before the pod is gone.
	wc, err := client.NewWithWatch(w.n.Config, client.Options{Scheme: w.n.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, cancel := context.WithTimeout(ctx, 2*grace)
	defer cancel()
	watch, err := wc.Watch(watchCtx, &corev1.PodList{}, client.InNamespace(p.Namespace), client.MatchingFields{"metadata.name": p.Name})
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Stop()
	start := time.Now()
	if err := w.n.Client.Delete(ctx, &p); err != nil {
		t.Fatal(err)
	}
	var exit *corev1.ContainerStateTerminated
	for ev := range watch.ResultChan() {
		cur, ok := ev.Object.(*corev1.Pod)
		if !ok {
			continue
		}
		if len(cur.Status.ContainerStatuses) > 0 && cur.Status.ContainerStatuses[0].State.Terminated != nil {
			exit = cur.Status.ContainerStatuses[0].State.Terminated
			break
		}
	}
	took := time.Since(start)
	if exit == nil {
		t.Fatalf("pod %s: no exit of its container seen within %s of its deletion", p.Name, took)
	}
	t.Logf("pod %s: exited %d (%s) %s after deletion; grace period %s, preStop sleep included", p.Name, exit.ExitCode, exit.Reason, took.Round(100*time.Millisecond), grace)
	if exit.ExitCode != 0 || took >= grace {
		t.Errorf("pod %s did not drain on SIGTERM within %s: exit %d (%s) after %s", p.Name, grace, exit.ExitCode, exit.Reason, took)
	}
	// The Deployment replaces it.
	w.waitDeploymentReady(ctx, t)
}

func (w *nodeTest) waitDeploymentReady(ctx context.Context, t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var d appsv1.Deployment
		if err := w.n.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fencegateRelease}, &d); err != nil {
			t.Fatal(err)
		}
		// No pod of an older ReplicaSet may still be terminating: it
		// answers admission calls on the connections it has.
		if d.Status.ReadyReplicas == *d.Spec.Replicas && d.Status.UpdatedReplicas == *d.Spec.Replicas &&
			d.Status.Replicas == *d.Spec.Replicas && ptr.Deref(d.Status.TerminatingReplicas, 1) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deployment %s not rolled out: %d replicas, %d updated, %d ready, %d terminating",
				fencegateRelease, d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, ptr.Deref(d.Status.TerminatingReplicas, -1))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// wantDrainHeldByPDB drains the node: the budget lets one fencegate pod go
// and keeps the other running, so the drain times out.
func (w *nodeTest) wantDrainHeldByPDB(ctx context.Context, t *testing.T) {
	res := w.kubectl(ctx, t, w.n.ControlPlane, nil, "drain", w.n.NodeName,
		"--ignore-daemonsets", "--delete-emptydir-data", "--timeout", "30s")
	out := res.Stdout + res.Stderr
	if res.ExitCode == 0 {
		t.Fatalf("kubectl drain succeeded, but the budget must keep one fencegate pod:\n%s", out)
	}
	if !strings.Contains(out, "disruption budget") {
		t.Errorf("kubectl drain failed, but not on the disruption budget:\n%s", out)
	}
	if pods := w.fencegatePods(ctx, t); len(pods) != 1 {
		t.Errorf("after the drain, %d fencegate pods run; the budget keeps exactly 1", len(pods))
	}
	t.Logf("kubectl drain: %s", lastLine(out))
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// tailLogs prints the end of every log of the node test, for a failure.
func tailLogs(t *testing.T, dir string) {
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	more, _ := filepath.Glob(filepath.Join(dir, "*", "*.log"))
	for _, f := range append(logs, more...) {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
		t.Logf("--- %s (last lines) ---\n%s", f, strings.Join(lines[max(0, len(lines)-15):], "\n"))
	}
}
