package fenceagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/tcpproxy"
	"github.com/fencegate/fencegate/internal/testcerts"
)

// Timing of agents against the real authority: short, so that tests that
// wait for heartbeats or leases stay quick.
const (
	liveInterval = time.Second
	liveTimeout  = 500 * time.Millisecond
)

// liveAgent is an agent on the real clock, talking to a real authority.
type liveAgent struct {
	*ClusterFence
	logs *capturedLogs
	// stop ends the agent and waits for Start to return, like a pod that
	// is replaced in a rollout.
	stop func()
}

// runAgent starts an agent for cluster c that reaches the authority at addr
// and writes into log under c's name.
func runAgent(t testing.TB, addr string, log *storeLog, c fencestate.Cluster, edit func(*Options)) *liveAgent {
	t.Helper()
	conn, err := Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return runAgentOn(t, fencev1.NewFenceServiceClient(conn), log, c, edit)
}

// runAgentOn starts an agent for cluster c that talks to the authority
// through client.
func runAgentOn(t testing.TB, client fencev1.FenceServiceClient, log *storeLog, c fencestate.Cluster, edit func(*Options)) *liveAgent {
	t.Helper()
	logs := &capturedLogs{}
	opts := Options{
		Client:          client,
		Writer:          &recordingWriter{name: c.Name, log: log},
		ClusterName:     c.Name,
		ClusterUID:      c.UID,
		Epoch:           c.Epoch,
		DeclareInterval: liveInterval,
		DeclareTimeout:  liveTimeout,
		Logger:          logs.logger(),
		Registerer:      prometheus.NewRegistry(),
	}
	if edit != nil {
		edit(&opts)
	}
	agent, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- agent.Start(ctx) }()
	stop := sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: Start: %v", c.Name, err)
		}
	})
	t.Cleanup(stop)
	return &liveAgent{ClusterFence: agent, logs: logs, stop: stop}
}

// exclusive makes the log check, on every write, that no agents of two
// clusters have active as their last written status at the same time: the
// property fencing exists for. Agents are named after their cluster, as
// "east" or, for several pods of one cluster, "east/1", "east/2". It
// returns the violations seen so far.
func (l *storeLog) exclusive() func() []string {
	last := map[string]fencestate.Status{}
	var violations []string
	l.onWrite = func(w storeWrite) {
		last[w.agent] = w.state.Status
		var active []string
		clusters := map[string]bool{}
		for agent, s := range last {
			if s == fencestate.Active {
				active = append(active, agent)
				cluster, _, _ := strings.Cut(agent, "/")
				clusters[cluster] = true
			}
		}
		if len(clusters) > 1 {
			slices.Sort(active)
			violations = append(violations, fmt.Sprintf("%v active at once, at %s's write", active, w.agent))
		}
	}
	return func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		return slices.Clone(violations)
	}
}

// before checks that a's first write of status as (at or after index from)
// happened before b's first write of bs, and returns their indexes.
func (l *storeLog) before(t testing.TB, a string, as fencestate.Status, b string, bs fencestate.Status, from int) {
	t.Helper()
	ia, wa := l.first(a, as, from)
	ib, wb := l.first(b, bs, 0)
	switch {
	case ia < 0:
		t.Fatalf("%s never wrote %s", a, as)
	case ib < 0:
		t.Fatalf("%s never wrote %s", b, bs)
	case ia > ib || wa.at.After(wb.at):
		t.Errorf("%s wrote %s (write #%d at %s) after %s wrote %s (write #%d at %s)",
			a, as, ia, wa.at.Format(time.StampMicro), b, bs, ib, wb.at.Format(time.StampMicro))
	default:
		t.Logf("%s wrote %s %s before %s wrote %s", a, as, wb.at.Sub(wa.at), b, bs)
	}
}

var (
	east = fencestate.Cluster{Name: "east", UID: "2b1f0c9e-54a1-4d8e-9b0e-6f1d2c3b4a50", Epoch: 7}
	west = fencestate.Cluster{Name: "west", UID: "7c3e1a2b-9d84-4f60-a1b2-c3d4e5f60718", Epoch: 7}
)

func withEpoch(c fencestate.Cluster, epoch uint64) fencestate.Cluster {
	c.Epoch = epoch
	return c
}

// TestTakeoverWithReachableHolder: raising west's epoch fences east, which
// writes fenced and releases; west is active only after east stopped being.
func TestTakeoverWithReachableHolder(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{})
	log := &storeLog{}
	violations := log.exclusive()

	eastAgent := runAgent(t, srv.Addr, log, east, nil)
	eastActive := waitStatus(t, eastAgent.ClusterFence, fencestate.Active)

	// West at the same epoch stays fenced: failover needs a higher epoch.
	westAgent := runAgent(t, srv.Addr, log, west, nil)
	fenced := waitStatus(t, westAgent.ClusterFence, fencestate.Fenced)
	if fenced.Holder != east || fenced.Reason != rpctypes.ReasonClusterFenced {
		t.Errorf("west fenced by %+v (%s), want east", fenced.Holder, fenced.Reason)
	}
	if !strings.Contains(fenced.Message, "raise its epoch above 7") {
		t.Errorf("fenced message %q does not say what to do", fenced.Message)
	}

	// Failover: west is rolled out with a higher epoch.
	westAgent.stop()
	west8 := withEpoch(west, 8)
	westAgent = runAgent(t, srv.Addr, log, west8, nil)
	westActive := waitStatus(t, westAgent.ClusterFence, fencestate.Active)
	eastFenced := waitStatus(t, eastAgent.ClusterFence, fencestate.Fenced)

	iActive, _ := log.first(east.Name, fencestate.Active, 0)
	log.before(t, east.Name, fencestate.Fenced, west.Name, fencestate.Active, iActive)
	if v := violations(); len(v) > 0 {
		t.Errorf("two clusters active at once: %v", v)
	}
	if got, want := log.statuses(east.Name), []fencestate.Status{fencestate.Unknown, fencestate.Active, fencestate.Fenced}; !slices.Equal(got, want) {
		t.Errorf("east wrote %v, want %v", got, want)
	}
	if got, want := log.statuses(west.Name), []fencestate.Status{
		fencestate.Unknown, fencestate.Fenced, // west at epoch 7
		fencestate.Unknown, fencestate.Acquiring, fencestate.Active, // west at epoch 8
	}; !slices.Equal(got, want) {
		t.Errorf("west wrote %v, want %v", got, want)
	}
	// East is told while still named holder (west's takeover pending) or
	// once west holds.
	if h := eastFenced.Holder; h != east && h != west8 {
		t.Errorf("east fenced naming holder %+v, want east (pending takeover) or west at epoch 8", h)
	}
	if westActive.Token <= eastActive.Token {
		t.Errorf("west's token %d is not above east's %d", westActive.Token, eastActive.Token)
	}
	released := slices.ContainsFunc(eastAgent.logs.all(), func(l logLine) bool { return strings.HasPrefix(l.Msg, "fence released") })
	if !released {
		t.Error("east did not release the fence")
	}
	got, err := srv.Client(t).GetFence(context.Background(), &fencev1.GetFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if h := got.GetFence().GetHolder(); h.GetClusterUid() != west.UID || h.GetEpoch() != 8 || h.GetToken() != westActive.Token {
		t.Errorf("authority's holder = %v, want west at epoch 8 with token %d", h, westActive.Token)
	}
}

// TestPartitionedHolderLapsesBeforeTakeover: east loses the authority; its
// own timer makes it unknown before the authority lets west (raised epoch)
// take over at the end of east's lease.
func TestPartitionedHolderLapsesBeforeTakeover(t *testing.T) {
	const lease = 2 * time.Second
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: lease})
	proxy := startProxy(t, srv.Addr)
	log := &storeLog{}
	violations := log.exclusive()
	fast := func(o *Options) {
		o.DeclareInterval, o.DeclareTimeout, o.LeaseMargin = 400*time.Millisecond, 300*time.Millisecond, 500*time.Millisecond
	}

	eastAgent := runAgent(t, proxy.Addr(), log, east, fast)
	waitStatus(t, eastAgent.ClusterFence, fencestate.Active)
	proxy.Cut(tcpproxy.Drop)
	westAgent := runAgent(t, srv.Addr, log, withEpoch(west, 8), fast)

	waitStatus(t, westAgent.ClusterFence, fencestate.Active)
	lapsed := waitStatus(t, eastAgent.ClusterFence, fencestate.Unknown)
	if lapsed.Reason != fencestate.ReasonLeaseExpired {
		t.Errorf("east unknown because %s, want %s", lapsed.Reason, fencestate.ReasonLeaseExpired)
	}
	iActive, _ := log.first(east.Name, fencestate.Active, 0)
	log.before(t, east.Name, fencestate.Unknown, west.Name, fencestate.Active, iActive)
	if v := violations(); len(v) > 0 {
		t.Errorf("two clusters active at once: %v", v)
	}
	if testutil.ToFloat64(eastAgent.metrics.declarations.WithLabelValues(transient.result())) == 0 {
		t.Error("east saw no failed declaration: the proxy did not cut it off")
	}
}

// TestRestoredCluster: a cluster restored from a snapshot keeps its UID, so a
// lower epoch is epoch_regressed; one rebuilt from manifests has a new UID
// and is merely fenced.
func TestRestoredCluster(t *testing.T) {
	tests := map[string]struct {
		restored    fencestate.Cluster
		want        fencestate.Status
		wantMessage string
	}{
		"restored from an etcd snapshot: same UID, lower epoch": {
			restored:    withEpoch(east, 5),
			want:        fencestate.EpochRegressed,
			wantMessage: "set its epoch to at least 7",
		},
		"rebuilt from manifests: new UID, lower epoch": {
			restored:    fencestate.Cluster{Name: "east", UID: "0f0e0d0c-0b0a-4908-8706-050403020100", Epoch: 5},
			want:        fencestate.Fenced,
			wantMessage: "raise its epoch above 7",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			srv := authoritytest.Start(t, authoritytest.Options{})
			log := &storeLog{}
			before := runAgent(t, srv.Addr, log, east, nil)
			waitStatus(t, before.ClusterFence, fencestate.Active)
			before.stop()

			after := runAgent(t, srv.Addr, log, tc.restored, nil)
			s := waitStatus(t, after.ClusterFence, tc.want)
			if !strings.Contains(s.Message, tc.wantMessage) {
				t.Errorf("message %q does not contain %q", s.Message, tc.wantMessage)
			}
			if s.Cluster != tc.restored || s.Holder.Epoch != 7 {
				t.Errorf("state names cluster %+v, holder %+v", s.Cluster, s.Holder)
			}
		})
	}
}

// TestAuthorityRestart: the holder keeps its status through a restart of
// the authority (failed heartbeats are transient), reconnects its watch, and
// still hears a takeover at once.
func TestAuthorityRestart(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{})
	log := &storeLog{}
	violations := log.exclusive()
	eastAgent := runAgent(t, srv.Addr, log, east, nil)
	waitStatus(t, eastAgent.ClusterFence, fencestate.Active)

	srv.Restart(t)
	eventually(t, "east's watch reconnects", func() bool { return testutil.ToFloat64(eastAgent.metrics.watchRetries) >= 1 })
	ok := testutil.ToFloat64(eastAgent.metrics.declarations.WithLabelValues(granted.result()))
	eventually(t, "east renews after the restart", func() bool {
		return testutil.ToFloat64(eastAgent.metrics.declarations.WithLabelValues(granted.result())) > ok
	})
	if got := log.statuses(east.Name); !slices.Equal(got, []fencestate.Status{fencestate.Unknown, fencestate.Active}) {
		t.Errorf("east wrote %v across the restart, want to stay active", got)
	}

	westAgent := runAgent(t, srv.Addr, log, withEpoch(west, 8), nil)
	waitStatus(t, westAgent.ClusterFence, fencestate.Active)
	waitStatus(t, eastAgent.ClusterFence, fencestate.Fenced)
	if v := violations(); len(v) > 0 {
		t.Errorf("two clusters active at once: %v", v)
	}
}

// pod names the agent of one pod of cluster c, writing into log as
// "<cluster>/<n>".
func pod(log *storeLog, c fencestate.Cluster, n int) func(*Options) {
	return func(o *Options) {
		name := fmt.Sprintf("%s/%d", c.Name, n)
		o.Instance, o.Writer = name, &recordingWriter{name: name, log: log}
	}
}

// TestEveryPodOfTheHolderHoldsALease: east runs two pods, each its own
// instance with its own lease. When one of them is cut off from the
// authority, a takeover by west waits until that pod's lease ended, even
// though the other pod was told it is fenced and released its lease; and a
// pod that stops releases its lease, after it stopped acting as holder.
func TestEveryPodOfTheHolderHoldsALease(t *testing.T) {
	const lease = 2 * time.Second
	fast := func(o *Options) {
		o.DeclareInterval, o.DeclareTimeout, o.LeaseMargin = 400*time.Millisecond, 300*time.Millisecond, 500*time.Millisecond
	}
	both := func(edits ...func(*Options)) func(*Options) {
		return func(o *Options) {
			for _, e := range edits {
				e(o)
			}
		}
	}

	t.Run("one pod partitioned: the takeover waits for its lease", func(t *testing.T) {
		srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: lease})
		proxy := startProxy(t, srv.Addr)
		log := &storeLog{}
		violations := log.exclusive()
		east1 := runAgent(t, proxy.Addr(), log, east, both(fast, pod(log, east, 1)))
		east2 := runAgent(t, srv.Addr, log, east, both(fast, pod(log, east, 2)))
		waitStatus(t, east1.ClusterFence, fencestate.Active)
		waitStatus(t, east2.ClusterFence, fencestate.Active)

		proxy.Cut(tcpproxy.Drop)
		westAgent := runAgent(t, srv.Addr, log, withEpoch(west, 8), fast)
		waitStatus(t, westAgent.ClusterFence, fencestate.Active)
		lapsed := waitStatus(t, east1.ClusterFence, fencestate.Unknown)
		if lapsed.Reason != fencestate.ReasonLeaseExpired {
			t.Errorf("east/1 unknown because %s, want %s", lapsed.Reason, fencestate.ReasonLeaseExpired)
		}
		waitStatus(t, east2.ClusterFence, fencestate.Fenced)
		if !slices.ContainsFunc(east2.logs.all(), func(l logLine) bool { return strings.HasPrefix(l.Msg, "fence released") }) {
			t.Error("east/2 did not release its lease")
		}
		iActive, _ := log.first("east/1", fencestate.Active, 0)
		log.before(t, "east/1", fencestate.Unknown, west.Name, fencestate.Active, iActive)
		if got := log.statuses(west.Name); !slices.Contains(got, fencestate.Acquiring) {
			t.Errorf("west wrote %v: it never waited for east/1's lease", got)
		}
		if v := violations(); len(v) > 0 {
			t.Errorf("two clusters active at once: %v", v)
		}
	})

	t.Run("a pod that stops releases its lease", func(t *testing.T) {
		srv := authoritytest.Start(t, authoritytest.Options{})
		log := &storeLog{}
		east1 := runAgent(t, srv.Addr, log, east, pod(log, east, 1))
		east2 := runAgent(t, srv.Addr, log, east, pod(log, east, 2))
		waitStatus(t, east1.ClusterFence, fencestate.Active)
		waitStatus(t, east2.ClusterFence, fencestate.Active)

		east1.stop()
		if last, _ := log.last("east/1"); last.Status != fencestate.Unknown || last.Reason != fencestate.ReasonShuttingDown {
			t.Errorf("east/1 left %s (%s) in its store, want unknown (%s)", last.Status, last.Reason, fencestate.ReasonShuttingDown)
		}
		got, err := srv.Client(t).GetFence(context.Background(), &fencev1.GetFenceRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var leases []string
		for _, l := range got.GetFence().GetHolder().GetInstances() {
			leases = append(leases, fmt.Sprintf("%s released=%v", l.GetInstance(), l.GetReleased()))
		}
		if want := []string{"east/1 released=true", "east/2 released=false"}; !slices.Equal(leases, want) {
			t.Errorf("the authority's leases of east: %v, want %v", leases, want)
		}
	})
}

// TestShortLeaseDoesNotFlap: an authority run with a lease much shorter
// than the agent's declare interval (3s against 5s, less a margin of 2s)
// must not make the holder lapse between heartbeats. With renewals every
// declare interval it was active for about one second in five; the agent
// renews at a third of lease TTL − margin instead. The machine is kept busy
// meanwhile, as a loaded node would be.
func TestShortLeaseDoesNotFlap(t *testing.T) {
	srv := authoritytest.Start(t, authoritytest.Options{LeaseTTL: 3 * time.Second, Quiet: true})
	log := &storeLog{}
	agent := runAgent(t, srv.Addr, log, east, func(o *Options) {
		o.DeclareInterval, o.DeclareTimeout, o.LeaseMargin = DefaultDeclareInterval, DefaultDeclareTimeout, DefaultLeaseMargin
	})
	waitStatus(t, agent.ClusterFence, fencestate.Active)

	busy, stopBusy := context.WithCancel(context.Background())
	defer stopBusy()
	for range 4 {
		go func() {
			for busy.Err() == nil {
				for i := 0; i < 1e6; i++ {
					_ = i * i
				}
			}
		}()
	}
	// Three full declare intervals: the old agent lapsed in each of them.
	var lapses []string
	deadline := time.Now().Add(3 * DefaultDeclareInterval)
	for time.Now().Before(deadline) {
		if s := agent.Status(); s.Status != fencestate.Active {
			lapses = append(lapses, fmt.Sprintf("%s (%s)", s.Status, s.Reason))
		}
		time.Sleep(50 * time.Millisecond)
	}
	stopBusy()
	if len(lapses) > 0 {
		t.Errorf("the holder lapsed %d times in %s: %v", len(lapses), 3*DefaultDeclareInterval, lapses)
	}
	if got := testutil.ToFloat64(agent.metrics.transitions.WithLabelValues(string(fencestate.Active), string(fencestate.Unknown))); got != 0 {
		t.Errorf("%v transitions from active to unknown, want none", got)
	}
}

// TestPermissionDeniedFailsClosedAndRecovers: an agent whose identity the
// authority does not let declare as its cluster stays unknown
// (PERMISSION_DENIED), logs it once, naming its identity, and holds the
// fence by itself once the authorization file lets it.
func TestPermissionDeniedFailsClosedAndRecovers(t *testing.T) {
	ca, serving, err := testcerts.Loopback("authority-ca")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ca.MutualTLS(serving)
	if err != nil {
		t.Fatal(err)
	}
	const identity = "spiffe://example.org/fencegate/cluster/east"
	file := filepath.Join(t.TempDir(), "authorization.yaml")
	writeFile := func(cluster string) {
		t.Helper()
		content := fmt.Sprintf("clusters:\n  - {identity: %q, cluster: %s, domains: [\"*\"]}\n", identity, cluster)
		if err := os.WriteFile(file+".tmp", []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(file+".tmp", file); err != nil {
			t.Fatal(err)
		}
	}
	writeFile("west") // a mistake: east's identity bound to west
	srv := authoritytest.Start(t, authoritytest.Options{Quiet: true, AuthorizationFile: file, TLS: serverTLS})
	clientTLS, err := ca.ClientTLS(identity)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := Dial(srv.Addr, clientTLS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	agent := runAgentOn(t, fencev1.NewFenceServiceClient(conn), &storeLog{}, east, nil)

	s := waitReason(t, agent.ClusterFence, rpctypes.ReasonPermissionDenied)
	if s.Status != fencestate.Unknown || !strings.Contains(s.Message, identity) || !strings.Contains(s.Message, "may act only as cluster west") {
		t.Errorf("state %+v: want unknown, naming the identity and what it may do", s)
	}
	// More refused heartbeats log nothing more.
	n := testutil.ToFloat64(agent.metrics.declarations.WithLabelValues(refusedPermission.result()))
	eventually(t, "two more refused heartbeats", func() bool {
		return testutil.ToFloat64(agent.metrics.declarations.WithLabelValues(refusedPermission.result())) >= n+2
	})
	denials := 0
	for _, l := range agent.logs.all() {
		if strings.Contains(l.Msg, "refuses this agent's identity") {
			denials++
			if l.Identity != identity {
				t.Errorf("the log line names identity %q, want %q", l.Identity, identity)
			}
		}
	}
	if denials != 1 {
		t.Errorf("%d log lines about the refusal, want 1", denials)
	}

	writeFile("east")
	waitStatus(t, agent.ClusterFence, fencestate.Active)
}

// waitReason waits until c's reason is reason and returns that state.
func waitReason(t testing.TB, c *ClusterFence, reason string) fencestate.State {
	t.Helper()
	var st fencestate.State
	eventually(t, c.opts.ClusterName+"'s reason is "+reason, func() bool {
		st = c.Status()
		return st.Reason == reason
	})
	return st
}
