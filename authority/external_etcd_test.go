package authority_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/authority/etcdbackend"
	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/internal/tlsutil"
	"github.com/fencegate/fencegate/test/cluster"
)

// etcdMember is one process of a test etcd cluster.
type etcdMember struct {
	name     string
	endpoint string
	cmd      *exec.Cmd
	log      string
	exited   chan struct{}
}

// crash kills the member without warning: unlike a graceful stop, a crashed
// leader does not hand its leadership over, so the cluster has no leader
// until the others notice and elect one.
func (m *etcdMember) crash(t testing.TB) {
	t.Helper()
	if err := m.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill etcd member %s: %v", m.name, err)
	}
	<-m.exited
}

// startEtcdCluster runs a 3-member etcd cluster of real etcd processes on
// loopback, serving clients over mTLS, and returns its members and the TLS
// files of a client.
func startEtcdCluster(t *testing.T) ([]*etcdMember, tlsutil.ClientFiles) {
	t.Helper()
	bin := etcdBinary(t)
	dir := t.TempDir()
	ca, err := testcerts.NewCA("etcd-ca")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("localhost", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Client("fencegate-authority")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey, err := server.WriteFiles(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey, err := client.WriteFiles(dir, "client")
	if err != nil {
		t.Fatal(err)
	}

	ports := freePorts(t, 6)
	var initial []string
	for i := range 3 {
		initial = append(initial, fmt.Sprintf("m%d=http://127.0.0.1:%d", i, ports[2*i+1]))
	}
	var members []*etcdMember
	for i := range 3 {
		name := fmt.Sprintf("m%d", i)
		clientURL := fmt.Sprintf("https://127.0.0.1:%d", ports[2*i])
		peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1])
		m := &etcdMember{name: name, endpoint: clientURL, log: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
		logFile, err := os.Create(m.log)
		if err != nil {
			t.Fatal(err)
		}
		m.cmd = exec.Command(bin,
			"--name", name,
			"--data-dir", filepath.Join(dir, name),
			"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
			"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
			"--initial-cluster", strings.Join(initial, ","),
			"--initial-cluster-state", "new", "--initial-cluster-token", "fencegate-test",
			"--cert-file", serverCert, "--key-file", serverKey,
			"--client-cert-auth", "--trusted-ca-file", caFile,
			// Fast failure detection, so losing the leader costs a second,
			// not several.
			"--heartbeat-interval", "50", "--election-timeout", "500",
			"--log-level", "warn",
		)
		m.cmd.Stdout, m.cmd.Stderr = logFile, logFile
		if err := m.cmd.Start(); err != nil {
			t.Fatalf("start etcd member %s: %v", name, err)
		}
		go func() {
			_ = m.cmd.Wait()
			_ = logFile.Close()
			close(m.exited)
		}()
		members = append(members, m)
	}
	t.Cleanup(func() {
		for _, m := range members {
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
		if t.Failed() {
			for _, m := range members {
				out, _ := os.ReadFile(m.log)
				t.Logf("etcd member %s log:\n%s", m.name, out)
			}
		}
	})
	return members, tlsutil.ClientFiles{CAFile: caFile, CertFile: clientCert, KeyFile: clientKey}
}

func etcdBinary(t testing.TB) string {
	t.Helper()
	return cluster.RequireTool(t, "etcd")
}

// freePorts returns n loopback ports that were free a moment ago.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = lis.Close() }()
		ports = append(ports, lis.Addr().(*net.TCPAddr).Port)
	}
	return ports
}

// TestExternalEtcdClusterSurvivesLosingAMember runs the authority against a
// separate 3-member etcd cluster over mTLS, crashes the etcd leader, and keeps
// declaring: every call must still succeed (the store retries while a new
// leader is elected), and a watch opened before keeps delivering.
func TestExternalEtcdClusterSurvivesLosingAMember(t *testing.T) {
	members, tlsFiles := startEtcdCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var endpoints []string
	for _, m := range members {
		endpoints = append(endpoints, m.endpoint)
	}
	etcd, err := etcdbackend.Dial(ctx, etcdbackend.ExternalOptions{Endpoints: endpoints, TLS: tlsFiles, Logger: testr.NewWithInterface(t, testr.Options{})})
	if err != nil {
		t.Fatalf("dial the etcd cluster: %v", err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	client := serve(t, etcd, authority.Options{LeaseTTL: time.Minute})

	first, err := client.DeclareClusterEpoch(ctx, declareReq("", "east", 1))
	if err != nil {
		t.Fatalf("east declares: %v", err)
	}
	watch, err := client.WatchFence(ctx, &fencev1.WatchFenceRequest{})
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	if _, err := watch.Recv(); err != nil {
		t.Fatalf("watch snapshot: %v", err)
	}

	leader := etcdLeader(ctx, t, etcd, members)
	t.Logf("crashing the etcd leader %s", leader.name)
	leader.crash(t)

	for i := range 20 {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := client.DeclareClusterEpoch(callCtx, declareReq("", "east", 1))
		cancel()
		if err != nil {
			t.Fatalf("declaration %d after losing the leader: %v", i, err)
		}
		if resp.GetToken() != first.GetToken() {
			t.Fatalf("declaration %d: token %d, want the renewed %d", i, resp.GetToken(), first.GetToken())
		}
	}
	if _, err := client.DeclareClusterEpoch(ctx, declareReq("", "west", 2)); errorInfo(err).GetReason() != rpctypes.ReasonAcquiring {
		t.Fatalf("west declares 2: %v, want %s", err, rpctypes.ReasonAcquiring)
	}
	if _, err := client.ReleaseFence(ctx, releaseReq("", "east", 1)); err != nil {
		t.Fatalf("east releases: %v", err)
	}
	if _, err := client.DeclareClusterEpoch(ctx, declareReq("", "west", 2)); err != nil {
		t.Fatalf("west takes over: %v", err)
	}
	for {
		ev, err := watch.Recv()
		if err != nil {
			t.Fatalf("watch after losing the leader: %v", err)
		}
		if ev.GetType() == fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED {
			if got := ev.GetFence().GetHolder().GetClusterName(); got != "west" {
				t.Errorf("holder after the takeover %q, want west", got)
			}
			break
		}
	}
}

func etcdLeader(ctx context.Context, t *testing.T, etcd *clientv3.Client, members []*etcdMember) *etcdMember {
	t.Helper()
	for _, m := range members {
		st, err := etcd.Status(ctx, m.endpoint)
		if err != nil {
			t.Fatalf("status of etcd member %s: %v", m.name, err)
		}
		if st.Leader == st.Header.GetMemberId() {
			return m
		}
	}
	t.Fatal("no etcd member is the leader")
	return nil
}
