package authority_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"github.com/go-logr/logr"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authz"
	"github.com/fencegate/fencegate/authority/etcdbackend"
	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/test/proc"
	"github.com/fencegate/fencegate/test/stack"
)

// clustersPerDomain is how many clusters declare in each domain of
// BenchmarkAgents: one holds the fence, the others stand by.
const clustersPerDomain = 10

// agentsSeconds is how long BenchmarkAgents heartbeats, and each of its
// floors runs, per size.
const agentsSeconds = 10

// agentsShort and agentsShortSeconds are the size TestAgents runs, so that
// BenchmarkAgents' code paths stay tested.
const (
	agentsShort        = 10
	agentsShortSeconds = 2
)

// heartbeatInterval is how often each agent of BenchmarkAgents declares.
// fencegate's agents declare every --declare-interval (5 s by default):
// one a second is five times their default load.
const heartbeatInterval = time.Second

// declareTimeout bounds one declaration, as the agents' --declare-timeout
// does by default.
const declareTimeout = 3 * time.Second

// BenchmarkAgents measures the authority under the load of n agents, each
// declaring once a second, as fencegate's agents do: 10 clusters per domain
// (n/10 domains), the holder of each domain renewing its lease (or asking
// for it to be kept, as fencegate's agents do when they declare this often:
// see fenceagent.KeepsLease) and nine standbys declaring the holder's epoch or one below (CLUSTER_FENCED), every
// agent of a cluster on its cluster's one connection, and every agent
// watching its domain's WatchFence stream. The authority is its own
// process, `fencegate-authority` (beside FENCEGATE_TEST_BINARY), serving
// mTLS with an authorization file, over an etcd process of its own (the
// etcd binary of FENCEGATE_TEST_ASSETS), so that the CPU each spends is read
// from /proc apart from the load generator's.
//
// After the agents stop, two floors run against the same etcd, from a bare
// etcd client in the benchmark's process, on the same schedule (n a second
// for the same time): the txn floor makes single-key transactions shaped as
// the authority's (compare the key's ModRevision, put a value of the size of
// a domain's stored record, else get it); the keep-alive floor renews n etcd
// leases, one LeaseKeepAlive stream per cluster, which etcd answers on its
// leader without a raft entry. A floor's CPU is the etcd process's plus the
// bare client's (this process's, which then runs nothing else).
//
// Metrics (units are stable; a report tool parses them):
//   - declare-p50-ms, declare-p99-ms, declare-max-ms: a declaration's
//     round trip, from the agent's send to its answer.
//   - authority-handling-p99-ms: the upper bound of the bucket of the
//     authority's own handling-time histogram of DeclareClusterEpoch
//     (fencegate_authority_grpc_server_handling_seconds) that holds its
//     99th percentile over the run: the time in the authority's handler,
//     without the transport, the TLS and the machine's scheduling.
//   - heartbeats/s: declarations made a second.
//   - declare-failures: declarations that failed as an agent retries
//     (DeadlineExceeded after the agents' 3 s timeout, Unavailable); their
//     round trips count in the percentiles. Any other wrong answer fails
//     the benchmark.
//   - authority-cpu-us/heartbeat, etcd-cpu-us/heartbeat: the CPU the
//     authority process and the etcd process spent per declaration;
//     cpu-us/heartbeat is their sum.
//   - txn-floor-cpu-us/txn, keepalive-floor-cpu-us/renewal: the floors' CPU
//     per operation (etcd and the bare client).
//   - txn-floor-p99-ms, keepalive-floor-p99-ms: the floors' round trips.
//   - cpu/txn-floor, cpu/keepalive-floor: cpu-us/heartbeat over each
//     floor's CPU per operation.
//
// Sizes: 10, 100 and 1,000 agents (1, 10 and 100 domains), agentsSeconds
// each; TestAgents runs 10 agents for 2 s.
func BenchmarkAgents(b *testing.B) {
	for _, n := range []int{10, 100, 1000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			rig := startAuthorityProcess(b, clustersPerDomain)
			var r agentsResult
			for b.Loop() {
				r = rig.runAgents(b, n, agentsSeconds*time.Second)
			}
			r.report(b)
		})
	}
}

// TestAgents runs BenchmarkAgents and BenchmarkWatchFanout at a small size,
// so that their code paths stay tested: every holder renewed and every
// standby told CLUSTER_FENCED, and every watcher told of every takeover.
func TestAgents(t *testing.T) {
	rig := startAuthorityProcess(t, clustersPerDomain)
	r := rig.runAgents(t, agentsShort, agentsShortSeconds*time.Second)
	r.log(t)
	f := rig.fanout(t, 10, 3)
	t.Logf("fan-out to 10 watchers: last watcher p99 %v, max %v", f.p99, f.max)
}

// BenchmarkWatchFanout measures how fast a takeover reaches many WatchFence
// streams of one domain: from sending the declaration that is granted to
// the last watcher receiving its HOLDER_CHANGED event, each takeover a
// failover's (the taker declares a higher epoch, the holder releases, the
// taker declares again). The watchers are spread over up to 100 mTLS
// connections to the authority process of BenchmarkAgents; watchers=1 is
// the floor of the same path.
//
// Each iteration makes fanoutTakeovers takeovers. Metrics: fanout-p50-ms,
// fanout-p99-ms, fanout-max-ms (over the last iteration's takeovers, the
// time to the last watcher).
func BenchmarkWatchFanout(b *testing.B) {
	rig := startAuthorityProcess(b, clustersPerDomain)
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			var f fanoutResult
			for b.Loop() {
				f = rig.fanout(b, n, fanoutTakeovers)
			}
			b.ReportMetric(ms(f.p50), "fanout-p50-ms")
			b.ReportMetric(ms(f.p99), "fanout-p99-ms")
			b.ReportMetric(ms(f.max), "fanout-max-ms")
		})
	}
}

// fanoutTakeovers is how many takeovers one iteration of
// BenchmarkWatchFanout makes.
const fanoutTakeovers = 100

// authorityProcess is `fencegate-authority` over an etcd process, serving
// mTLS with an authorization file that binds each cluster's identity to its
// name in every domain.
type authorityProcess struct {
	addr string
	// metrics is the address of the authority's metrics.
	metrics   string
	authority *proc.Process
	etcd      *proc.Process
	// etcdClient is a bare client of the authority's etcd, for the floors.
	etcdClient *clientv3.Client
	ca         *testcerts.CA
	// clients are one client per cluster, each on a connection of its
	// own: all the agents of a cluster share one.
	clients []fencev1.FenceServiceClient
	fanouts int
}

// benchCluster is the name of cluster i, and benchIdentity its identity.
func benchCluster(i int) string { return fmt.Sprintf("c%d", i) }
func benchIdentity(i int) string {
	return "spiffe://fencegate.bench/cluster/" + benchCluster(i)
}

func startAuthorityProcess(tb testing.TB, clusters int) *authorityProcess {
	tb.Helper()
	dir := tb.TempDir()
	// Without FENCEGATE_TEST_BINARY the binary is compiled, which a cold
	// cache makes slow.
	build, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bin, err := stack.Build(build, dir)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	ports := freePorts(tb, 2)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	etcd, err := proc.Start(etcdBinary(tb), dir, "etcd",
		"--name", "bench", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL, "--log-level", "warn")
	if err != nil {
		tb.Fatal(err)
	}
	r := &authorityProcess{etcd: etcd}
	tb.Cleanup(func() {
		if err := etcd.Stop(10 * time.Second); err != nil {
			tb.Error(err)
		}
	})
	if r.etcdClient, err = etcdbackend.Dial(ctx, etcdbackend.ExternalOptions{Endpoints: []string{etcdURL}, Logger: logr.Discard()}); err != nil {
		tb.Fatalf("reach the etcd process (log %s): %v", etcd.LogPath, err)
	}
	tb.Cleanup(func() { _ = r.etcdClient.Close() })

	if r.ca, err = testcerts.NewCA("fencegate bench CA"); err != nil {
		tb.Fatal(err)
	}
	caFile, err := r.ca.WriteCA(dir, "ca")
	if err != nil {
		tb.Fatal(err)
	}
	serving, err := r.ca.Server("127.0.0.1", "localhost")
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile, err := serving.WriteFiles(dir, "authority")
	if err != nil {
		tb.Fatal(err)
	}
	var file authz.File
	for i := range clusters {
		file.Clusters = append(file.Clusters, authz.ClusterBinding{Identity: benchIdentity(i), Cluster: benchCluster(i), Domains: []string{authz.AllDomains}})
	}
	raw, err := yaml.Marshal(file)
	if err != nil {
		tb.Fatal(err)
	}
	authorization := filepath.Join(dir, "authorization.yaml")
	if err := os.WriteFile(authorization, raw, 0o600); err != nil {
		tb.Fatal(err)
	}

	if r.addr, err = proc.FreeAddress(); err != nil {
		tb.Fatal(err)
	}
	health, err := proc.FreeAddress()
	if err != nil {
		tb.Fatal(err)
	}
	if r.authority, err = proc.Start(stack.AuthorityBinary(bin), dir, "authority",
		"--listen", r.addr, "--etcd-endpoints", etcdURL, "--metrics-address", health,
		"--tls-cert", certFile, "--tls-key", keyFile, "--client-ca", caFile, "--authorization-file", authorization,
		"--log-format", "console"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := r.authority.Stop(15 * time.Second); err != nil {
			tb.Error(err)
		}
	})
	r.metrics = health
	if err := r.authority.WaitHealthy(ctx, http.DefaultClient, "http://"+health+"/readyz"); err != nil {
		tb.Fatal(err)
	}
	for i := range clusters {
		r.clients = append(r.clients, r.dial(tb, i))
	}
	return r
}

// dial returns a client of the authority on a connection of its own, as
// the agents of cluster i reach it.
func (r *authorityProcess) dial(tb testing.TB, i int) fencev1.FenceServiceClient {
	tb.Helper()
	cfg, err := r.ca.ClientTLS(benchIdentity(i))
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := fenceagent.Dial(r.addr, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = conn.Close() })
	return fencev1.NewFenceServiceClient(conn)
}

// benchAgent is one agent of BenchmarkAgents: one cluster's instance in one
// domain.
type benchAgent struct {
	client  fencev1.FenceServiceClient
	domain  string
	cluster int
	epoch   uint64
	holder  bool
	// generation is the newest generation of its cluster the agent was
	// told, which it presents, as fencegate's agents do.
	generation uint64
	// declarations counts the agent's declarations, which name themselves
	// by it; lease is the holder's lease: the declaration that got it and
	// when that one was sent.
	declarations uint64
	lease        struct {
		id   uint64
		sent time.Time
		ttl  time.Duration
	}
}

// request is the agent's next declaration: it asks for the holder's lease
// to be kept as long as fencegate's agents would, declaring every
// heartbeatInterval.
func (a *benchAgent) request() *fencev1.DeclareClusterEpochRequest {
	name := benchCluster(a.cluster)
	a.declarations++
	req := &fencev1.DeclareClusterEpochRequest{
		Domain: a.domain, ClusterName: name, ClusterUid: "uid-" + name, Epoch: a.epoch,
		Instance: name + "-0", ClusterGeneration: a.generation, DeclarationId: a.declarations,
	}
	if a.lease.id != 0 && fenceagent.KeepsLease(time.Since(a.lease.sent), heartbeatInterval, a.lease.ttl, fenceagent.DefaultLeaseMargin) {
		req.KeepLeaseOf = a.lease.id
	}
	return req
}

// declare sends one declaration and checks its answer: a renewal for the
// holder, CLUSTER_FENCED for a standby. It learns the cluster's generation,
// and the holder its lease.
func (a *benchAgent) declare(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, declareTimeout)
	defer cancel()
	req, sent := a.request(), time.Now()
	resp, err := a.client.DeclareClusterEpoch(ctx, req)
	if err == nil && a.holder {
		switch resp.GetLeaseDeclarationId() {
		case req.GetDeclarationId():
			a.lease.id, a.lease.sent, a.lease.ttl = req.GetDeclarationId(), sent, resp.GetLeaseTtl().AsDuration()
		case req.GetKeepLeaseOf():
		default:
			return fmt.Errorf("%s: the lease of declaration %d answers declaration %d, which keeps %d",
				benchCluster(a.cluster), resp.GetLeaseDeclarationId(), req.GetDeclarationId(), req.GetKeepLeaseOf())
		}
	}
	switch status.Code(err) {
	case codes.DeadlineExceeded, codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		// The agents retry these: a failed heartbeat, not a wrong answer.
		return transientError{err}
	}
	switch info := errorInfo(err); {
	case a.holder && err == nil:
		a.generation = max(a.generation, resp.GetClusterGeneration())
		return nil
	case !a.holder && info.GetReason() == rpctypes.ReasonClusterFenced:
		g, _ := strconv.ParseUint(info.GetMetadata()[rpctypes.MetadataClusterGeneration], 10, 64)
		a.generation = max(a.generation, g)
		return nil
	}
	if err == nil {
		err = errors.New("granted")
	}
	return fmt.Errorf("%s declares %d in %s (holder %t): %w", benchCluster(a.cluster), a.epoch, a.domain, a.holder, err)
}

// transientError is an error an agent retries at its next heartbeat.
type transientError struct{ error }

func (e transientError) Unwrap() error { return e.error }

// agentsResult is what one run of the agents and its floors measured.
type agentsResult struct {
	agents    int
	latencies []time.Duration
	// failed counts the declarations that failed (timed out), which
	// latencies include.
	failed                int
	wall                  time.Duration
	authorityCPU, etcdCPU time.Duration
	// handlingP99 bounds the 99th percentile of the time the authority's
	// handler took (see handlingP99).
	handlingP99              time.Duration
	txnFloor, keepaliveFloor floorResult
}

// floorResult is what one floor measured.
type floorResult struct {
	ops       int
	latencies []time.Duration
	cpu       time.Duration
}

func (r agentsResult) cpuPerHeartbeat() time.Duration {
	return (r.authorityCPU + r.etcdCPU) / time.Duration(len(r.latencies))
}

func (f floorResult) cpuPerOp() time.Duration { return f.cpu / time.Duration(f.ops) }

func (r agentsResult) report(b *testing.B) {
	b.ReportMetric(ms(percentile(r.latencies, 50)), "declare-p50-ms")
	b.ReportMetric(ms(percentile(r.latencies, 99)), "declare-p99-ms")
	b.ReportMetric(ms(percentile(r.latencies, 100)), "declare-max-ms")
	b.ReportMetric(ms(r.handlingP99), "authority-handling-p99-ms")
	b.ReportMetric(float64(len(r.latencies))/r.wall.Seconds(), "heartbeats/s")
	b.ReportMetric(float64(r.failed), "declare-failures")
	n := float64(len(r.latencies))
	b.ReportMetric(us(r.authorityCPU)/n, "authority-cpu-us/heartbeat")
	b.ReportMetric(us(r.etcdCPU)/n, "etcd-cpu-us/heartbeat")
	b.ReportMetric(us(r.cpuPerHeartbeat()), "cpu-us/heartbeat")
	b.ReportMetric(us(r.txnFloor.cpuPerOp()), "txn-floor-cpu-us/txn")
	b.ReportMetric(us(r.keepaliveFloor.cpuPerOp()), "keepalive-floor-cpu-us/renewal")
	b.ReportMetric(ms(percentile(r.txnFloor.latencies, 99)), "txn-floor-p99-ms")
	b.ReportMetric(ms(percentile(r.keepaliveFloor.latencies, 99)), "keepalive-floor-p99-ms")
	b.ReportMetric(float64(r.cpuPerHeartbeat())/float64(r.txnFloor.cpuPerOp()), "cpu/txn-floor")
	b.ReportMetric(float64(r.cpuPerHeartbeat())/float64(r.keepaliveFloor.cpuPerOp()), "cpu/keepalive-floor")
}

func (r agentsResult) log(t testing.TB) {
	t.Logf("%d agents: %d heartbeats (%d failed), declare p50 %v p99 %v; CPU per heartbeat %v (authority %v, etcd %v); txn floor %v/txn, keep-alive floor %v/renewal",
		r.agents, len(r.latencies), r.failed, percentile(r.latencies, 50), percentile(r.latencies, 99), r.cpuPerHeartbeat(),
		r.authorityCPU/time.Duration(len(r.latencies)), r.etcdCPU/time.Duration(len(r.latencies)),
		r.txnFloor.cpuPerOp(), r.keepaliveFloor.cpuPerOp())
}

// runAgents runs n agents heartbeating for d, then the two floors, each on
// the same schedule. It fails tb on any answer an agent would not expect.
func (r *authorityProcess) runAgents(tb testing.TB, n int, d time.Duration) agentsResult {
	tb.Helper()
	if n%clustersPerDomain != 0 || len(r.clients) < clustersPerDomain {
		tb.Fatalf("%d agents: want a multiple of %d, on %d clusters", n, clustersPerDomain, len(r.clients))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	agents := r.startAgents(ctx, tb, n)

	res := agentsResult{agents: n}
	handled0 := r.handlingBuckets(tb)
	authority0, etcd0 := processCPU(tb, r.authority.Pid()), processCPU(tb, r.etcd.Pid())
	start := time.Now()
	perAgent := make([][]time.Duration, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []error
	for i, a := range agents {
		wg.Go(func() {
			var err error
			var failed int
			perAgent[i], failed, err = onSchedule(start, agentSlot(i, n), n, d, func() error { return a.declare(ctx) })
			mu.Lock()
			res.failed += failed
			mu.Unlock()
			if err != nil {
				mu.Lock()
				failures = append(failures, fmt.Errorf("agent %d, after %d heartbeats: %w", i, len(perAgent[i]), err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.wall = time.Since(start)
	res.authorityCPU = processCPU(tb, r.authority.Pid()) - authority0
	res.etcdCPU = processCPU(tb, r.etcd.Pid()) - etcd0
	res.handlingP99 = handlingP99(handled0, r.handlingBuckets(tb))
	res.latencies = slices.Concat(perAgent...)
	slices.Sort(res.latencies)
	if len(failures) > 0 {
		tb.Fatalf("agents failed: %v", failures[:min(len(failures), 5)])
	}
	if len(res.latencies) == 0 {
		tb.Fatal("no heartbeat answered")
	}
	cancel()

	res.txnFloor = r.txnFloor(tb, n, d)
	res.keepaliveFloor = r.keepaliveFloor(tb, n, d)
	return res
}

// startAgents opens every agent's WatchFence stream, makes the holder of
// each domain hold it and each standby declare once, and returns the
// agents. The streams are drained until ctx ends.
func (r *authorityProcess) startAgents(ctx context.Context, tb testing.TB, n int) []*benchAgent {
	tb.Helper()
	var agents []*benchAgent
	for i := range n {
		d, c := i/clustersPerDomain, i%clustersPerDomain
		a := &benchAgent{client: r.clients[c], domain: fmt.Sprintf("d%03d", d), cluster: c, holder: c == d%clustersPerDomain, epoch: 2}
		if !a.holder {
			// Standbys declare the holder's epoch or one below.
			a.epoch -= uint64(c % 2)
		}
		agents = append(agents, a)
	}
	for _, a := range agents {
		watch, err := a.client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: a.domain})
		if err != nil {
			tb.Fatal(err)
		}
		go func() {
			for {
				if _, err := watch.Recv(); err != nil {
					return
				}
			}
		}()
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for d := 0; d < n; d += clustersPerDomain {
		domain := agents[d : d+clustersPerDomain]
		wg.Go(func() {
			for _, a := range domain {
				if a.holder {
					errs <- a.declare(ctx)
				}
			}
			for _, a := range domain {
				if !a.holder {
					errs <- a.declare(ctx)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			tb.Fatal(err)
		}
	}
	return agents
}

// agentSlot is the place of agent i of n on the schedule (see onSchedule):
// the agents of one domain (i/clustersPerDomain) are a tenth of the
// interval apart, as clusters that each started and jitter their
// heartbeats on their own are, rather than one after the other within a
// few milliseconds every time, which would make each domain's declarations
// queue behind each other's writes every second.
func agentSlot(i, n int) int {
	return i%clustersPerDomain*(n/clustersPerDomain) + i/clustersPerDomain
}

// onSchedule calls op every heartbeatInterval for d, the i-th of n callers
// offset by i/n of the interval from start, and returns each call's round
// trip and how many failed with a transientError (their round trips
// count too). A call that runs past its next turn skips that turn, as an
// agent's timer would wait for it. It stops at op's first other error, and
// returns it.
func onSchedule(start time.Time, i, n int, d time.Duration, op func() error) (rtts []time.Duration, failed int, err error) {
	var ended time.Time
	offset := heartbeatInterval * time.Duration(i) / time.Duration(n)
	for k := time.Duration(0); k*heartbeatInterval < d; k++ {
		due := start.Add(offset + k*heartbeatInterval)
		if ended.After(due) {
			continue
		}
		time.Sleep(time.Until(due))
		sent := time.Now()
		err := op()
		ended = time.Now()
		rtts = append(rtts, ended.Sub(sent))
		var transient transientError
		switch {
		case errors.As(err, &transient):
			failed++
		case err != nil:
			return rtts, failed, err
		}
	}
	return rtts, failed, nil
}

// recordSize is the size of the largest fence record the authority stored
// in its etcd.
func (r *authorityProcess) recordSize(tb testing.TB) int {
	tb.Helper()
	resp, err := r.etcdClient.Get(context.Background(), "/fencegate/fences/", clientv3.WithPrefix())
	if err != nil {
		tb.Fatal(err)
	}
	size := 0
	for _, kv := range resp.Kvs {
		if strings.HasSuffix(string(kv.Key), "/state") {
			size = max(size, len(kv.Value))
		}
	}
	if size == 0 {
		tb.Fatal("the authority stored no fence record")
	}
	return size
}

// txnFloor makes n single-key transactions a second for d with the bare
// etcd client, each shaped as the authority's.
func (r *authorityProcess) txnFloor(tb testing.TB, n int, d time.Duration) floorResult {
	tb.Helper()
	value := strings.Repeat("x", r.recordSize(tb))
	ctx := context.Background()
	return r.floor(tb, n, d, func(i int) func() error {
		key := fmt.Sprintf("/bench/floor/%d", i)
		var rev int64
		return func() error {
			ctx, cancel := context.WithTimeout(ctx, declareTimeout)
			defer cancel()
			resp, err := r.etcdClient.Txn(ctx).
				If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
				Then(clientv3.OpPut(key, value)).
				Else(clientv3.OpGet(key)).
				Commit()
			if errors.Is(err, context.DeadlineExceeded) {
				return transientError{err}
			}
			if err != nil {
				return err
			}
			if !resp.Succeeded {
				return fmt.Errorf("floor key %s changed under the floor", key)
			}
			rev = resp.Header.Revision
			return nil
		}
	})
}

// keepaliveFloor renews n etcd leases a second for d, on one LeaseKeepAlive
// stream per cluster as an etcd client keeps one per connection.
func (r *authorityProcess) keepaliveFloor(tb testing.TB, n int, d time.Duration) floorResult {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leases := make([]clientv3.LeaseID, n)
	for i := range leases {
		resp, err := r.etcdClient.Grant(ctx, 15)
		if err != nil {
			tb.Fatal(err)
		}
		leases[i] = resp.ID
	}
	streams := make([]*keepaliveStream, clustersPerDomain)
	for i := range streams {
		s, err := openKeepalive(ctx, pb.NewLeaseClient(r.etcdClient.ActiveConnection()))
		if err != nil {
			tb.Fatal(err)
		}
		streams[i] = s
	}
	return r.floor(tb, n, d, func(i int) func() error {
		s, id := streams[i%len(streams)], leases[i]
		return func() error { return s.renew(ctx, id) }
	})
}

// floor runs op(i) for n callers on the agents' schedule for d and
// measures the etcd process's CPU and this process's.
func (r *authorityProcess) floor(tb testing.TB, n int, d time.Duration, op func(i int) func() error) floorResult {
	tb.Helper()
	ops := make([]func() error, n)
	for i := range ops {
		ops[i] = op(i)
	}
	etcd0, self0 := processCPU(tb, r.etcd.Pid()), selfCPU(tb)
	start := time.Now()
	perCaller := make([][]time.Duration, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { perCaller[i], _, errs[i] = onSchedule(start, i, n, d, ops[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		tb.Fatalf("floor: %v", err)
	}
	f := floorResult{cpu: processCPU(tb, r.etcd.Pid()) - etcd0 + selfCPU(tb) - self0, latencies: slices.Concat(perCaller...)}
	f.ops = len(f.latencies)
	slices.Sort(f.latencies)
	return f
}

// keepaliveStream is one LeaseKeepAlive stream shared by many leases:
// etcd answers its requests in order.
type keepaliveStream struct {
	mu      sync.Mutex
	stream  pb.Lease_LeaseKeepAliveClient
	waiting []chan error
}

func openKeepalive(ctx context.Context, lc pb.LeaseClient) (*keepaliveStream, error) {
	stream, err := lc.LeaseKeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	s := &keepaliveStream{stream: stream}
	go func() {
		for {
			resp, err := stream.Recv()
			s.mu.Lock()
			if len(s.waiting) == 0 {
				s.mu.Unlock()
				return
			}
			done := s.waiting[0]
			s.waiting = s.waiting[1:]
			s.mu.Unlock()
			if err == nil && resp.TTL <= 0 {
				err = fmt.Errorf("lease %x expired", resp.ID)
			}
			done <- err
			if err != nil {
				return
			}
		}
	}()
	return s, nil
}

// renew renews lease id and waits for etcd's answer.
func (s *keepaliveStream) renew(ctx context.Context, id clientv3.LeaseID) error {
	done := make(chan error, 1)
	s.mu.Lock()
	s.waiting = append(s.waiting, done)
	err := s.stream.Send(&pb.LeaseKeepAliveRequest{ID: int64(id)})
	s.mu.Unlock()
	if err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// fanoutResult is what BenchmarkWatchFanout measured: over takeovers, the
// time from the granting declaration to the last watcher's event.
type fanoutResult struct {
	p50, p99, max time.Duration
}

// watchEvent is one event a watcher received, and when.
type watchEvent struct {
	typ fencev1.FenceEventType
	at  time.Time
}

// fanout opens n WatchFence streams on a domain of its own, spread over up
// to 100 connections, and hands the domain's fence over takeovers times.
func (r *authorityProcess) fanout(tb testing.TB, n, takeovers int) fanoutResult {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r.fanouts++
	domain := fmt.Sprintf("fanout-%d", r.fanouts)
	conns := make([]fencev1.FenceServiceClient, min(n, 100))
	for i := range conns {
		conns[i] = r.dial(tb, i%len(r.clients))
	}
	events := make(chan watchEvent, 4*n)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range n {
		watch, err := conns[i%len(conns)].WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: domain})
		if err != nil {
			tb.Fatal(err)
		}
		wg.Go(func() {
			for {
				ev, err := watch.Recv()
				if err != nil {
					return
				}
				select {
				case events <- watchEvent{typ: ev.GetType(), at: time.Now()}:
				case <-ctx.Done():
					return
				}
			}
		})
	}
	var latencies []time.Duration
	// seen waits until every watcher received the event want; after a
	// grant it records the time to the last one.
	seen := func(want fencev1.FenceEventType, sent time.Time) {
		var last time.Time
		for range n {
			select {
			case ev := <-events:
				if ev.typ != want {
					tb.Fatalf("a watcher received %s, want %s", ev.typ, want)
				}
				if ev.at.After(last) {
					last = ev.at
				}
			case <-time.After(10 * time.Second):
				tb.Fatalf("watchers did not all receive %s within 10s", want)
			}
		}
		if want == fencev1.FenceEventType_FENCE_EVENT_TYPE_HOLDER_CHANGED {
			latencies = append(latencies, last.Sub(sent))
		}
	}
	seen(fencev1.FenceEventType_FENCE_EVENT_TYPE_SNAPSHOT, time.Now())
	clients := map[string]fencev1.FenceServiceClient{benchCluster(0): r.clients[0], benchCluster(1): r.clients[1]}
	h := &handover{domain: domain, clusters: [2]string{benchCluster(0), benchCluster(1)},
		client: func(name string) fencev1.FenceServiceClient { return clients[name] }}
	h.begin(ctx, tb, seen)
	latencies = latencies[:0]
	for range takeovers {
		h.next(ctx, tb, seen)
	}
	slices.Sort(latencies)
	return fanoutResult{p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: percentile(latencies, 100)}
}

// processCPU is the CPU time process pid has spent, user and system, from
// /proc/<pid>/stat.
func processCPU(tb testing.TB, pid int) time.Duration {
	tb.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The fields after the command name, which may hold spaces, start
	// with the third (state); utime and stime are the 14th and 15th.
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		tb.Fatalf("/proc/%d/stat: %q", pid, s)
	}
	// Linux reports them in USER_HZ, 100 a second.
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// selfCPU is the CPU time this process has spent, user and system.
func selfCPU(tb testing.TB) time.Duration {
	tb.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// percentile is the p-th percentile of sorted latencies (p=100: the
// largest).
func percentile(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)*p/100, len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// handlingFamily is the authority's histogram of its handlers' time.
const handlingFamily = "fencegate_authority_grpc_server_handling_seconds"

// handlingBuckets scrapes the authority's handling-time histogram of
// DeclareClusterEpoch: the cumulative count at each bucket's upper bound.
func (r *authorityProcess) handlingBuckets(tb testing.TB) map[float64]uint64 {
	tb.Helper()
	resp, err := http.Get("http://" + r.metrics + "/metrics")
	if err != nil {
		tb.Fatalf("scrape the authority's metrics: %v", err)
	}
	defer func() { _ = resp.Body.Close() }()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatalf("parse the authority's metrics: %v", err)
	}
	buckets := map[float64]uint64{}
	for _, m := range families[handlingFamily].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "grpc_method" && l.GetValue() == "DeclareClusterEpoch" {
				for _, b := range m.GetHistogram().GetBucket() {
					buckets[b.GetUpperBound()] += b.GetCumulativeCount()
				}
			}
		}
	}
	if len(buckets) == 0 {
		tb.Fatalf("the authority's metrics have no %s of DeclareClusterEpoch", handlingFamily)
	}
	return buckets
}

// handlingP99 is the upper bound of the bucket that holds the 99th
// percentile of the declarations handled between the scrapes before and
// after; 0 when none was.
func handlingP99(before, after map[float64]uint64) time.Duration {
	bounds := slices.Sorted(maps.Keys(after))
	total := after[math.Inf(1)] - before[math.Inf(1)]
	for _, le := range bounds {
		if n := after[le] - before[le]; total > 0 && n*100 >= total*99 {
			return time.Duration(le * float64(time.Second))
		}
	}
	return 0
}
