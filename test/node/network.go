package node

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/proc"
)

// Each node takes one block k (1-254) of three ranges, so that nodes of
// tests that run at the same time never share an address, a route or an
// interface name: 10.241.k.0/30 for the link to the host (host .1, node
// .2), 10.242.k.0/24 for pods and 10.243.k.0/24 for Services.
const (
	linkRange    = "10.241.%d.%d"
	podRange     = "10.242.%d.0/24"
	serviceRange = "10.243.%d.0/24"
	// linkPrefix names the host's end of the link, "fgnode<k>".
	linkPrefix = "fgnode"
)

// The node's mount namespace hides the host's /run, /var/lib and /var/log
// behind its own tmpfs: containerd, the CNI plugins and the kubelet write
// to fixed paths there (shim sockets, network namespaces, IP allocations,
// container log links).
var privateDirs = []string{"/run", "/var/lib", "/var/log"}

// startNamespaces starts the node's first process, pause, in new PID,
// network and mount namespaces. unshare's --kill-child ends it if unshare
// dies, and unshare gets SIGKILL if this process dies (proc.Start), so a
// killed test leaves no node behind.
func (n *Node) startNamespaces(pause string) error {
	var err error
	n.init, err = proc.Start("unshare", n.Dir, "node-init",
		"--fork", "--kill-child", "--pid", "--mount-proc", "--net", "--mount", "--propagation", "private", pause)
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if n.initPid = childPid(n.init.Pid()); n.initPid > 0 {
			break
		}
		if n.init.Exited() || time.Now().After(deadline) {
			return fmt.Errorf("the node's namespaces did not start; see %s", n.init.LogPath)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, dir := range privateDirs {
		if err := n.inNode(context.Background(), "mount", "-t", "tmpfs", "-o", "mode=0755", "tmpfs", dir); err != nil {
			return err
		}
	}
	return nil
}

// childPid is the first child of a process (unshare's and nsenter's
// forked child), or 0.
func childPid(pid int) int {
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if f := strings.Fields(string(raw)); len(f) > 0 {
		child, _ := strconv.Atoi(f[0])
		return child
	}
	return 0
}

// nsenter is the command line that runs args in the node's namespaces.
func (n *Node) nsenter(args ...string) []string {
	return append([]string{"--target", strconv.Itoa(n.initPid), "--net", "--mount", "--pid", "--"}, args...)
}

// inNode runs a command in the node's namespaces and waits for it.
func (n *Node) inNode(ctx context.Context, args ...string) error {
	return run(ctx, "nsenter", n.nsenter(args...)...)
}

// run runs a command and returns its output in the error if it fails.
func run(ctx context.Context, bin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// setUpNetwork links the node's network namespace to the host with a veth
// pair in a free block, routes the node's pod and Service ranges to it, and
// lets the node forward packets (pods to the host, the host to pods).
func (n *Node) setUpNetwork(ctx context.Context) error {
	var errs []error
	block := 0
	for _, k := range randomBlocks() {
		link := linkPrefix + strconv.Itoa(k)
		if routed(fmt.Sprintf("10.242.%d.", k)) || routed(fmt.Sprintf("10.243.%d.", k)) {
			continue
		}
		// Creating the interface claims the block: a second node picking
		// the same block fails here and tries the next.
		err := run(ctx, "ip", "link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(n.initPid))
		if err != nil {
			errs = append(errs, err)
			if len(errs) > 3 {
				return fmt.Errorf("no free address block for the node: %w", errors.Join(errs...))
			}
			continue
		}
		block, n.hostLink = k, link
		break
	}
	if block == 0 {
		return errors.New("no free address block for the node: every 10.242.k.0/24 is routed")
	}
	n.HostIP, n.IP = fmt.Sprintf(linkRange, block, 1), fmt.Sprintf(linkRange, block, 2)
	n.PodCIDR, n.ServiceCIDR = fmt.Sprintf(podRange, block), fmt.Sprintf(serviceRange, block)
	steps := [][]string{
		{"ip", "addr", "add", n.HostIP + "/30", "dev", n.hostLink},
		{"ip", "link", "set", n.hostLink, "up"},
		{"ip", "route", "add", n.PodCIDR, "via", n.IP, "dev", n.hostLink},
		{"ip", "route", "add", n.ServiceCIDR, "via", n.IP, "dev", n.hostLink},
	}
	inside := [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", n.IP + "/30", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", n.HostIP},
		{"sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	// The host's routes need the link up on both ends.
	for _, step := range inside {
		if err := n.inNode(ctx, step...); err != nil {
			return err
		}
	}
	for _, step := range steps {
		if err := run(ctx, step[0], step[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// randomBlocks is every block in a random order.
func randomBlocks() []int {
	blocks := make([]int, 254)
	for i := range blocks {
		blocks[i] = i + 1
	}
	for i := len(blocks) - 1; i > 0; i-- {
		j, _ := rand.Int(rand.Reader, big.NewInt(int64(i+1)))
		blocks[i], blocks[j.Int64()] = blocks[j.Int64()], blocks[i]
	}
	return blocks
}

// routed reports whether the host has a route or an address in a range.
func routed(prefix string) bool {
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	return err != nil || strings.Contains(string(out), prefix)
}

// removeNetwork deletes the host's end of the link if it is still there
// (the namespace's end went with the namespace); the routes go with it.
func (n *Node) removeNetwork() error {
	if n.hostLink == "" {
		return nil
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join("/sys/class/net", n.hostLink)); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
	}
	return run(context.Background(), "ip", "link", "delete", n.hostLink)
}

// cgroupParent is where runc puts the cgroups of the node's containers in
// every hierarchy: the kubelet gives no parent without QoS cgroups, and
// containerd then uses its namespace's name.
const cgroupParent = "k8s.io"

// noteCgroupParents records the hierarchies that have no cgroupParent yet,
// so that Stop removes the ones the node made.
func (n *Node) noteCgroupParents() {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*"))
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, cgroupParent)); errors.Is(err, fs.ErrNotExist) {
			n.cgroupParents = append(n.cgroupParents, filepath.Join(d, cgroupParent))
		}
	}
}

// containerIDs lists the node's containers, whose cgroups outlive them when
// their processes are killed with the node.
func (n *Node) containerIDs() []string {
	if n.sock == "" {
		return nil
	}
	out, err := exec.Command("ctr", "--address", n.sock, "--namespace", "k8s.io", "containers", "ls", "--quiet").Output()
	if err != nil {
		return nil
	}
	return strings.Fields(string(out))
}

// removeCgroups removes the cgroups of the given containers in every
// hierarchy, and the parents the node made if they are left empty. Other
// nodes' containers have other IDs.
func (n *Node) removeCgroups(ids []string) error {
	var dirs []string
	for _, id := range ids {
		found, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupParent, id))
		dirs = append(dirs, found...)
	}
	var errs []error
	for _, d := range dirs {
		// A cgroup whose last process was just killed may be busy for a
		// moment.
		var err error
		for range 50 {
			if err = syscall.Rmdir(d); err == nil || errors.Is(err, fs.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup %s: %w", d, err))
		}
	}
	for _, d := range n.cgroupParents {
		// Not empty: another node's containers are there.
		_ = syscall.Rmdir(d)
	}
	return errors.Join(errs...)
}

// buildPause compiles the pause command (test/node/pause) into dir.
func buildPause(ctx context.Context, dir string) (string, error) {
	root, err := cluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "pause")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "./test/node/pause")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the pause command: %w\n%s", err, out)
	}
	return bin, nil
}

// writeSigningKey writes the service account token signing key pair the
// way envtest names it: sa-signer.key and sa-signer.crt (the public key).
func writeSigningKey(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("service account signing key: %w", err)
	}
	priv, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("service account signing key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("service account signing key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sa-signer.key"), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: priv}), 0o600); err != nil {
		return fmt.Errorf("write service account signing key: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sa-signer.crt"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return fmt.Errorf("write service account signing key: %w", err)
	}
	return nil
}

// firstIP is the first address of a range: the `kubernetes` Service's.
func firstIP(cidr string) (string, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return "", fmt.Errorf("range %q: %w", cidr, err)
	}
	return p.Masked().Addr().Next().String(), nil
}
