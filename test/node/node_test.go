package node

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/test/cluster"
)

// TestNodeRunsAPodAndLeavesNothing starts a node, runs a pod on it, stops
// the node and checks that nothing it made is left: no process, interface,
// route, cgroup or state directory.
func TestNodeRunsAPodAndLeavesNothing(t *testing.T) {
	cluster.SkipShort(t, "a node")
	dir := t.TempDir()
	n, err := Start(t.Context(), Options{Name: "leaves-nothing", Dir: dir, Say: t.Logf})
	stopped := false
	t.Cleanup(func() {
		if !stopped && n != nil {
			_ = n.Stop()
		}
	})
	if errors.Is(err, ErrPrerequisite) {
		cluster.MissingPrerequisite(t, err)
	}
	if err != nil {
		t.Fatal(err)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "pause", Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "pause", Image: PauseImage, ImagePullPolicy: corev1.PullNever,
				SecurityContext: &corev1.SecurityContext{RunAsNonRoot: ptr.To(true), ReadOnlyRootFilesystem: ptr.To(true)},
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	if err := n.Client.Create(t.Context(), pod); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if err := n.Client.Get(t.Context(), client.ObjectKeyFromObject(pod), pod); err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod not running after 2 minutes: %+v", pod.Status)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if ip, err := netip.ParseAddr(pod.Status.PodIP); err != nil || !netip.MustParsePrefix(n.PodCIDR).Contains(ip) {
		t.Errorf("pod IP %s is not in the node's pod range %s", pod.Status.PodIP, n.PodCIDR)
	}

	link, state, initPid, containers := n.hostLink, n.state, n.initPid, n.containerIDs()
	if len(containers) < 2 {
		t.Fatalf("want the pod's sandbox and container in containerd, have %v", containers)
	}
	stopped = true
	if err := n.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join("/sys/class/net", link)); err == nil {
		t.Errorf("interface %s is left", link)
	}
	routes, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, cidr := range []string{n.PodCIDR, n.ServiceCIDR} {
		if strings.Contains(string(routes), cidr) {
			t.Errorf("route to %s is left:\n%s", cidr, routes)
		}
	}
	for _, id := range containers {
		if left, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupParent, id)); len(left) > 0 {
			t.Errorf("cgroups of container %s are left: %v", id, left)
		}
	}
	if _, err := os.Stat(state); err == nil {
		t.Errorf("state directory %s is left", state)
	}
	if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(initPid))); err == nil {
		t.Errorf("the node's first process %d still runs", initPid)
	}
}
