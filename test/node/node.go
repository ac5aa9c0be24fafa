package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/proc"
)

// ErrPrerequisite marks a missing prerequisite of the node (root, a Debian
// package, a built binary): StartForTest skips on it, with what to do
// (cluster.MissingPrerequisite). It is cluster.ErrPrerequisite.
var ErrPrerequisite = cluster.ErrPrerequisite

// Options configure a node.
type Options struct {
	// Name is the node's and its cluster's name.
	Name string
	// Dir receives the logs of every process of the node. It is the
	// caller's and outlives Stop, so that the logs outlive a failure; the
	// node's state (containerd's images, the kubelet's volumes) is kept in
	// a directory of its own that Stop removes. Empty: the logs go there
	// too.
	Dir string
	// Images are image archives (hack/image.sh, build-image) that
	// containerd imports before Start returns: the node pulls nothing.
	Images []string
	// Say reports progress; nil is quiet.
	Say func(format string, args ...any)
}

// Node is a one-node cluster: a control plane with a controller manager and
// a scheduler, and a node with containerd, a kubelet and kube-proxy.
type Node struct {
	*cluster.ControlPlane
	// NodeName is the Node object's name.
	NodeName string
	// IP is the node's address, on its own interface; HostIP is the host's
	// end of that link, where the API server listens.
	IP, HostIP string
	// PodCIDR and ServiceCIDR are the node's pod and Service ranges; the
	// host routes both to the node.
	PodCIDR, ServiceCIDR string
	// Dir holds the logs (Options.Dir).
	Dir string

	opts     Options
	assets   string
	state    string // removed by Stop
	hostLink string
	// cgroupParents are the hierarchies' k8s.io cgroups the node made.
	cgroupParents []string
	init          *proc.Process
	initPid       int
	host          []*proc.Process // on the host: controller manager, scheduler
	inside        []*proc.Process // in the node's namespaces: containerd, kubelet, kube-proxy
	sock          string          // containerd's socket
	admin         string          // the components' kubeconfig
}

// StartForTest starts a node that stops when the test ends; under -short
// it skips, when a prerequisite is missing it calls
// cluster.MissingPrerequisite, and it fails the test on any other error.
// Its logs go to a directory of the test's.
func StartForTest(t testing.TB, opts Options) *Node {
	t.Helper()
	cluster.SkipShort(t, "a node (a control plane, containerd, a kubelet)")
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	if opts.Say == nil {
		opts.Say = t.Logf
	}
	n, err := Start(t.Context(), opts)
	if n != nil {
		t.Cleanup(func() {
			if err := n.Stop(); err != nil {
				t.Errorf("stop node %q: %v", n.NodeName, err)
			}
		})
	}
	switch {
	case errors.Is(err, ErrPrerequisite):
		cluster.MissingPrerequisite(t, err)
	case err != nil:
		t.Fatalf("node: %v (logs in %s)", err, opts.Dir)
	}
	return n
}

// Start starts a node and waits until it is Ready, the cluster's default
// ServiceAccount and root CA ConfigMap exist and every image is imported.
// On error it returns what it started, for Stop, or nil if it started
// nothing.
func Start(ctx context.Context, opts Options) (*Node, error) {
	if opts.Name == "" {
		opts.Name = "node"
	}
	if opts.Say == nil {
		opts.Say = func(string, ...any) {}
	}
	assets, err := checkPrerequisites()
	if err != nil {
		return nil, err
	}
	state, err := os.MkdirTemp("", "fencegate-node-"+opts.Name+"-")
	if err != nil {
		return nil, fmt.Errorf("node state directory: %w", err)
	}
	if opts.Dir == "" {
		opts.Dir = state
	}
	n := &Node{NodeName: opts.Name, Dir: opts.Dir, opts: opts, assets: assets, state: state}
	if err := n.start(ctx); err != nil {
		return n, err
	}
	return n, nil
}

func (n *Node) start(ctx context.Context) error {
	say := n.opts.Say
	start := time.Now()
	pause, err := buildPause(ctx, n.state)
	if err != nil {
		return err
	}
	say("node %s: starting its namespaces and network", n.NodeName)
	n.noteCgroupParents()
	if err := n.startNamespaces(pause); err != nil {
		return err
	}
	if err := n.setUpNetwork(ctx); err != nil {
		return err
	}
	say("node %s: starting the control plane on %s (services %s, pods %s)", n.NodeName, n.HostIP, n.ServiceCIDR, n.PodCIDR)
	if n.ControlPlane, err = cluster.Start(cluster.Options{Name: n.NodeName, Configure: n.configureAPIServer}); err != nil {
		return err
	}
	if err := n.startControllers(); err != nil {
		return err
	}
	say("node %s: starting containerd, the kubelet and kube-proxy", n.NodeName)
	if err := n.startContainerd(ctx, pause); err != nil {
		return err
	}
	if err := n.startKubelet(); err != nil {
		return err
	}
	if err := n.startKubeProxy(); err != nil {
		return err
	}
	if err := n.waitReady(ctx); err != nil {
		return err
	}
	say("node %s: Ready after %s", n.NodeName, time.Since(start).Round(time.Second))
	return nil
}

// checkPrerequisites finds the binaries the node runs and returns the
// directory of the Kubernetes ones.
func checkPrerequisites() (string, error) {
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%w: the node needs root (namespaces, mounts, iptables)", ErrPrerequisite)
	}
	var missing []string
	for _, bin := range []string{"containerd", "ctr", "runc", "iptables", "unshare", "nsenter", "ip", "sysctl", "mount"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	for _, f := range []string{filepath.Join(cniBinDir, "bridge"), busybox} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w: %s not found; `make test` installs them (hack/node-prerequisites.sh: apt-get install containerd runc containernetworking-plugins iptables busybox-static iproute2 procps util-linux)",
			ErrPrerequisite, strings.Join(missing, ", "))
	}
	if _, err := cluster.AssetsDir(); err != nil {
		return "", err
	}
	assets, err := cluster.ToolsDir("kubelet", "kube-proxy", "kube-controller-manager", "kube-scheduler", "build-image")
	if err != nil {
		return "", err
	}
	return assets, nil
}

// configureAPIServer serves the API server on the host's end of the node's
// link, with a serving certificate for that address and for the
// `kubernetes` Service, and turns on the ServiceAccount admission plugin
// that mounts pods' tokens.
func (n *Node) configureAPIServer(env *envtest.Environment) error {
	api := env.ControlPlane.GetAPIServer()
	dir := filepath.Join(n.state, "apiserver")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("API server directory: %w", err)
	}
	ca, err := testcerts.NewCA("fencegate-node-" + n.NodeName)
	if err != nil {
		return err
	}
	serviceIP, err := firstIP(n.ServiceCIDR)
	if err != nil {
		return err
	}
	serving, err := ca.Server(n.HostIP, serviceIP, "127.0.0.1", "localhost",
		"kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local")
	if err != nil {
		return err
	}
	// envtest keeps a serving certificate it finds in its directory, and
	// then also expects the service account signing key there.
	if _, _, err := serving.WriteFiles(dir, "apiserver"); err != nil {
		return err
	}
	if err := writeSigningKey(dir); err != nil {
		return err
	}
	if _, err := ca.WriteCA(n.state, "ca"); err != nil {
		return err
	}
	port, err := freePort(n.HostIP)
	if err != nil {
		return err
	}
	api.CertDir = dir
	secure := &api.SecureServing
	secure.CA = ca.CertPEM
	secure.Address, secure.Port = n.HostIP, port
	args := api.Configure()
	args.Set("service-cluster-ip-range", n.ServiceCIDR)
	args.Set("advertise-address", n.HostIP)
	// Logs and exec reach the kubelet on the node's address: there is no
	// DNS for its host name.
	args.Set("kubelet-preferred-address-types", "InternalIP")
	args.Disable("disable-admission-plugins")
	return nil
}

// startControllers starts kube-controller-manager (Deployments,
// ReplicaSets, StatefulSets, EndpointSlices, volume binding, disruption
// budgets, service accounts, the root CA ConfigMap) and kube-scheduler on
// the host, as cluster admins.
func (n *Node) startControllers() error {
	admin, err := n.adminKubeconfig()
	if err != nil {
		return err
	}
	kcm, err := proc.Start(filepath.Join(n.assets, "kube-controller-manager"), n.Dir, "kube-controller-manager",
		"--kubeconfig", admin,
		"--root-ca-file", filepath.Join(n.state, "ca.crt"),
		"--service-cluster-ip-range", n.ServiceCIDR,
		"--cluster-cidr", n.PodCIDR,
		"--allocate-node-cidrs=false",
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--secure-port=0",
		"--concurrent-deployment-syncs=2",
		"--node-monitor-grace-period=40s",
		"--v=1")
	if err != nil {
		return err
	}
	n.host = append(n.host, kcm)
	scheduler, err := proc.Start(filepath.Join(n.assets, "kube-scheduler"), n.Dir, "kube-scheduler",
		"--kubeconfig", admin,
		"--leader-elect=false",
		"--secure-port=0",
		"--v=1")
	if err != nil {
		return err
	}
	n.host = append(n.host, scheduler)
	return nil
}

// adminKubeconfig is a cluster-admin kubeconfig for the node's components,
// which reach the API server on the host's end of the node's link.
func (n *Node) adminKubeconfig() (string, error) {
	if n.admin != "" {
		return n.admin, nil
	}
	var err error
	n.admin, _, err = n.AddUser("fencegate-node-admin", "system:masters")
	return n.admin, err
}

// waitReady waits for the Node to be Ready and the default ServiceAccount
// and kube-root-ca.crt of the default namespace, which every pod needs.
func (n *Node) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		err := n.ready(ctx)
		if err == nil {
			return nil
		}
		for _, p := range append(append([]*proc.Process{}, n.host...), n.inside...) {
			if p.Exited() {
				return fmt.Errorf("%s exited while the node started; see %s", p.Name, p.LogPath)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node %s not ready: %w (logs in %s)", n.NodeName, err, n.Dir)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (n *Node) ready(ctx context.Context) error {
	var node corev1.Node
	if err := n.Client.Get(ctx, client.ObjectKey{Name: n.NodeName}, &node); err != nil {
		return fmt.Errorf("node not registered: %w", err)
	}
	ready := false
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return errors.New("node not Ready")
	}
	if err := n.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "default"}, &corev1.ServiceAccount{}); err != nil {
		return fmt.Errorf("default ServiceAccount: %w", err)
	}
	if err := n.Client.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceDefault, Name: "kube-root-ca.crt"}, &corev1.ConfigMap{}); err != nil {
		return fmt.Errorf("kube-root-ca.crt ConfigMap: %w", err)
	}
	return nil
}

// Stop ends every process of the node, the control plane, the network and
// the directories, and reports what it could not clean up.
func (n *Node) Stop() error {
	var errs []error
	containers := n.containerIDs()
	// The node's daemons end first, while their network is there to close
	// their connections, and the API server ends before the network: it
	// calls itself on the link's address as it stops.
	for _, p := range slices.Backward(n.inside) {
		if pid := childPid(p.Pid()); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		if err := p.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range n.host {
		if err := p.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	if n.ControlPlane != nil {
		errs = append(errs, n.ControlPlane.Stop())
	}
	if n.init != nil {
		// The first process's exit makes the kernel kill every other
		// process of the PID namespace (shims, containers); the
		// namespaces then go with them. unshare itself ignores SIGTERM
		// while it waits for it.
		if n.initPid > 0 {
			_ = syscall.Kill(n.initPid, syscall.SIGTERM)
		}
		if err := n.init.Stop(10 * time.Second); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, n.removeNetwork(), n.removeCgroups(containers))
	// Mounts inside the state directory ended with the mount namespace.
	errs = append(errs, os.RemoveAll(n.state))
	return errors.Join(errs...)
}

// freePort returns a port nobody listens on at host.
func freePort(host string) (string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return "", fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer func() { _ = ln.Close() }()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), nil
}
