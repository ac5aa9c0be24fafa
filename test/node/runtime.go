package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/fencegate/fencegate/test/proc"
)

const (
	// cniBinDir is where Debian's containernetworking-plugins puts them.
	cniBinDir = "/usr/lib/cni"
	// busybox is Debian's busybox-static, the shell of helper images.
	busybox = "/bin/busybox"
	// PauseImage is the node's sandbox image, built from test/node/pause.
	PauseImage = "fencegate.local/pause:node"
	// KubectlImage holds the pinned kubectl: with ShellImage, the images
	// of the fencegate chart's `helm test` pod, which the node cannot pull.
	KubectlImage = "fencegate.local/kubectl:node"
	// ShellImage holds Debian's static busybox as /bin/sh and /bin/cp.
	ShellImage = "fencegate.local/busybox:node"
)

// containerdConfig is containerd's configuration (version 2, containerd
// 1.6). restrict_oom_score_adj: this machine may not lower oom_score_adj.
// runc, not crun: crun refuses the hybrid cgroup layout here.
var containerdConfig = template.Must(template.New("containerd").Parse(`version = 2
root = "{{.State}}/containerd/root"
state = "{{.State}}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{{.Socket}}"

[ttrpc]
  address = "{{.Socket}}.ttrpc"

[debug]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{{.Pause}}"
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{{.Runc}}"
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{{.CNIBin}}"
    conf_dir = "{{.State}}/cni"
`))

// cniConfig is the pod network: one bridge, addresses from the node's pod
// range. hairpinMode lets a pod reach itself through its Service.
var cniConfig = template.Must(template.New("cni").Parse(`{
  "cniVersion": "1.0.0",
  "name": "fencegate-node",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": "{{.PodCIDR}}"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`))

// kubeletConfig is the configuration that works on this kind of machine:
// cgroupfs without QoS cgroups or allocatable enforcement (this sandbox
// cannot manage the root cgroups), swap and cgroup v1 tolerated. The API
// server has no client certificate for kubelets, so the kubelet's own API
// (logs, exec) is open; it listens only on the node's address.
var kubeletConfig = template.Must(template.New("kubelet").Parse(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: {{.IP}}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
containerRuntimeEndpoint: unix://{{.Socket}}
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
failCgroupV1: false
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
clusterDNS: []
resolvConf: /etc/resolv.conf
podLogsDir: {{.State}}/pod-logs
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  imagefs.available: 1%
nodeStatusUpdateFrequency: 5s
syncFrequency: 10s
fileCheckFrequency: 10s
staticPodPath: ""
rotateCertificates: false
serverTLSBootstrap: false
protectKernelDefaults: false
`))

// kubeProxyConfig runs kube-proxy in iptables mode in the node's network
// namespace. conntrack is left as the kernel has it: those settings are not
// the namespace's own.
var kubeProxyConfig = template.Must(template.New("kube-proxy").Parse(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: {{.Kubeconfig}}
mode: iptables
hostnameOverride: {{.Name}}
clusterCIDR: {{.PodCIDR}}
bindAddress: {{.IP}}
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
iptables:
  localhostNodePorts: false
  syncPeriod: 30s
  minSyncPeriod: 0s
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
`))

// configValues fill the templates.
type configValues struct {
	State, Socket, Pause, Runc, CNIBin string
	IP, Name, PodCIDR                  string
	Kubeconfig                         string
}

func (n *Node) values() (configValues, error) {
	runc, err := exec.LookPath("runc")
	if err != nil {
		return configValues{}, fmt.Errorf("runc: %w", err)
	}
	return configValues{
		State: n.state, Socket: n.sock, Pause: PauseImage, Runc: runc, CNIBin: cniBinDir,
		IP: n.IP, Name: n.NodeName, PodCIDR: n.PodCIDR,
	}, nil
}

// writeTemplate renders a template into a file of the state directory.
func (n *Node) writeTemplate(t *template.Template, v configValues, name string) (string, error) {
	var buf bytes.Buffer
	if err := t.Execute(&buf, v); err != nil {
		return "", fmt.Errorf("render %s: %w", name, err)
	}
	path := filepath.Join(n.state, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", name, err)
	}
	return path, nil
}

// startInNode starts a long-running process in the node's namespaces.
func (n *Node) startInNode(name string, args ...string) error {
	p, err := proc.Start("nsenter", n.Dir, name, n.nsenter(args...)...)
	if err != nil {
		return err
	}
	n.inside = append(n.inside, p)
	return nil
}

// startContainerd starts containerd with the CNI configuration, waits for
// its socket and imports the pause, helper and caller's images.
func (n *Node) startContainerd(ctx context.Context, pause string) error {
	n.sock = filepath.Join(n.state, "containerd.sock")
	v, err := n.values()
	if err != nil {
		return err
	}
	config, err := n.writeTemplate(containerdConfig, v, "containerd.toml")
	if err != nil {
		return err
	}
	if _, err := n.writeTemplate(cniConfig, v, "cni/10-bridge.conflist"); err != nil {
		return err
	}
	if err := n.startInNode("containerd", "containerd", "--config", config); err != nil {
		return err
	}
	if err := n.waitSocket(ctx, n.sock); err != nil {
		return err
	}
	images, err := n.helperImages(ctx, pause)
	if err != nil {
		return err
	}
	for _, image := range append(images, n.opts.Images...) {
		if err := n.Ctr(ctx, "images", "import", "--all-platforms", image); err != nil {
			return fmt.Errorf("import %s: %w", image, err)
		}
	}
	return nil
}

// Ctr runs containerd's ctr in the Kubernetes namespace of the node's
// containerd.
func (n *Node) Ctr(ctx context.Context, args ...string) error {
	return run(ctx, "ctr", append([]string{"--address", n.sock, "--namespace", "k8s.io"}, args...)...)
}

// helperImages builds the pause image and the `helm test` images.
func (n *Node) helperImages(ctx context.Context, pause string) ([]string, error) {
	build := filepath.Join(n.assets, "build-image")
	kubectl := filepath.Join(n.assets, "kubectl")
	specs := []struct {
		ref  string
		args []string
	}{
		{PauseImage, []string{"-file", pause + ":/pause", "-entrypoint", "/pause", "-user", "65535:65535"}},
		{KubectlImage, []string{"-file", kubectl + ":/bin/kubectl", "-entrypoint", "/bin/kubectl", "-env", "PATH=/bin"}},
		{ShellImage, []string{"-file", busybox + ":/bin/busybox", "-symlink", "/bin/sh:busybox",
			"-symlink", "/bin/cp:busybox", "-env", "PATH=/bin"}},
	}
	var out []string
	for _, s := range specs {
		file := filepath.Join(n.state, "images", strings.NewReplacer("/", "_", ":", "_").Replace(s.ref)+".tar")
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return nil, fmt.Errorf("image directory: %w", err)
		}
		args := append([]string{"-ref", s.ref, "-o", file, "-epoch", "0"}, s.args...)
		if err := run(ctx, build, args...); err != nil {
			return nil, err
		}
		out = append(out, file)
	}
	return out, nil
}

// waitSocket waits until a Unix socket accepts connections.
func (n *Node) waitSocket(ctx context.Context, path string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		if c, err := net.Dial("unix", path); err == nil {
			_ = c.Close()
			return nil
		}
		for _, p := range n.inside {
			if p.Exited() {
				return fmt.Errorf("%s exited; see %s", p.Name, p.LogPath)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s does not accept connections: %w (logs in %s)", path, ctx.Err(), n.Dir)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startKubelet starts the kubelet in the node's namespaces, registered as
// NodeName on the node's address.
func (n *Node) startKubelet() error {
	v, err := n.values()
	if err != nil {
		return err
	}
	config, err := n.writeTemplate(kubeletConfig, v, "kubelet.yaml")
	if err != nil {
		return err
	}
	admin, err := n.adminKubeconfig()
	if err != nil {
		return err
	}
	return n.startInNode("kubelet", filepath.Join(n.assets, "kubelet"),
		"--config", config,
		"--kubeconfig", admin,
		"--root-dir", filepath.Join(n.state, "kubelet"),
		"--cert-dir", filepath.Join(n.state, "kubelet-pki"),
		"--hostname-override", n.NodeName,
		"--node-ip", n.IP,
		"--v", "1")
}

// startKubeProxy starts kube-proxy in the node's namespaces.
func (n *Node) startKubeProxy() error {
	v, err := n.values()
	if err != nil {
		return err
	}
	if v.Kubeconfig, err = n.adminKubeconfig(); err != nil {
		return err
	}
	config, err := n.writeTemplate(kubeProxyConfig, v, "kube-proxy.yaml")
	if err != nil {
		return err
	}
	return n.startInNode("kube-proxy", filepath.Join(n.assets, "kube-proxy"), "--config", config, "--v", "1")
}

// ContainerFile reads a file of a running container's process as the node
// sees it, /proc/<pid>/<name> (mountinfo, status, ...). containerID is the
// ID in the pod's status, with or without its containerd:// prefix.
func (n *Node) ContainerFile(ctx context.Context, containerID, name string) ([]byte, error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.sock, "--namespace", "k8s.io", "tasks", "ls").Output()
	if err != nil {
		return nil, fmt.Errorf("list containerd tasks: %w", err)
	}
	pid := ""
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid = f[1]
		}
	}
	if pid == "" {
		return nil, fmt.Errorf("container %s has no running task", id)
	}
	// The task's PID is in the node's PID namespace, whose /proc the
	// node's mount namespace shows.
	data, err := exec.CommandContext(ctx, "nsenter", n.nsenter("cat", filepath.Join("/proc", pid, name))...).Output()
	if err != nil {
		return nil, fmt.Errorf("read /proc/%s/%s of container %s: %w", pid, name, id, err)
	}
	return data, nil
}
