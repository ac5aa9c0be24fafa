package safety

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/tcpproxy"
	"github.com/fencegate/fencegate/policies"
)

// tokenAnnotation is the annotation the mutation stamps the fencing token
// into.
const tokenAnnotation = "fencegate.dev/token"

// writeTokenAnnotation is the annotation a gated write asserts the token it
// was decided under in.
const writeTokenAnnotation = "fencegate.dev/write-token"

// review is an AdmissionReview body that the pods are asked to admit, with
// the token annotation its object already carries: the policy leaves an
// annotation that already has the right value alone.
type review struct {
	body  []byte
	token string
}

// reviews are the requests of every history: creates and updates of
// Components as the API server sends them, one of them a large update with
// managedFields and kubectl's last-applied configuration.
func reviews(t testing.TB) []review {
	t.Helper()
	annotated := map[string]string{"team": "payments", tokenAnnotation: "0", "fencegate.dev/epoch": "0"}
	return []review{
		{body: enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("billing", "payments", nil), Username: "alice"})},
		{body: enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("search", "payments", map[string]string{"team": "search"}), Username: "alice"})},
		{body: enginetest.Review(t, engine.ReviewRequest{
			Operation: "UPDATE", Object: enginetest.Component("ledger", "payments", annotated), OldObject: enginetest.Component("ledger", "payments", annotated),
			Username: "system:serviceaccount:ci:deployer", Groups: []string{"system:serviceaccounts", "system:authenticated"},
		}), token: "0"},
		{body: enginetest.LargeUpdate(t), token: "1041"},
	}
}

// inDomain returns the reviews with their objects (old and new) labelled
// with fence domain name, as an application's Components are.
func inDomain(t testing.TB, reviews []review, name string) []review {
	t.Helper()
	out := make([]review, 0, len(reviews))
	for _, rv := range reviews {
		var body map[string]any
		if err := json.Unmarshal(rv.body, &body); err != nil {
			t.Fatalf("decode a review: %v", err)
		}
		request, _ := body["request"].(map[string]any)
		for _, field := range []string{"object", "oldObject"} {
			obj, ok := request[field].(map[string]any)
			if !ok {
				continue
			}
			meta, _ := obj["metadata"].(map[string]any)
			labels, _ := meta["labels"].(map[string]any)
			if labels == nil {
				labels = map[string]any{}
				meta["labels"] = labels
			}
			labels[domain.Label] = name
		}
		labelled, err := json.Marshal(body)
		if err != nil {
			t.Fatalf("encode a review: %v", err)
		}
		out = append(out, review{body: labelled, token: rv.token})
	}
	return out
}

// pod is one replica of a cluster's fencegate: a policy engine serving
// every domain of the run, a fence agent per domain that writes its
// domain's data.fence (through the pod's own proxies to the authority, so
// that it can be partitioned alone), and the admission requests it answers.
type pod struct {
	name    string
	cluster int
	uid     string
	// actor is who the checker holds the pod's admissions against: its
	// cluster's UID, or for a copy of the cluster restored from a backup,
	// which has the same UID, that UID marked as the copy.
	actor string
	// restored is set on the pods of a restored copy.
	restored bool
	// epochs are the epochs the agents declare, by domain (under run.mu).
	epochs []uint64
	engine *engine.Engine
	// agents are the fence agents, by domain.
	agents []*fenceagent.ClusterFence
	// proxies lead to the authority's replicas the pod calls: one, or
	// two that it sends its declarations and releases to in turn.
	proxies []*tcpproxy.Proxy
	// stopAgents ends the agents; the engine keeps its last fence states.
	stopAgents func()
	// stopServing ends the admission requests.
	stopServing func()

	mu         sync.Mutex
	admissions []Admission
	denied     int
	// stale counts the late commits denied as stale.
	stale int
	// tokens are the fence tokens p admitted under (asserting none), by
	// domain, in order: what its gated writers decided under.
	tokens [][]uint64
	// leaseFails makes every write of the pod's membership Lease fail
	// (the lease nemesis): its published hold stays as it was, and the
	// withdrawal before a release fails.
	leaseFails atomic.Bool
	// handingOver is set, by domain, from the end of a handover's wait
	// (AwaitHandover) to the withdrawal that follows it (BeforeRelease).
	handingOver []atomic.Bool
}

// writerWrap is a test-only change to what the agents write, used to show
// that the checker catches a broken fence.
type writerWrap func(fencestate.Writer) fencestate.Writer

// run plays one schedule against the authority and records its history.
type run struct {
	t     *testing.T
	srv   *lab
	sched schedule
	// domains are the fence domains every pod serves, named after the
	// seed: the lab's authority serves many histories.
	domains []string
	// bodies are the reviews of each domain's objects.
	bodies [][]review
	wrap   writerWrap
	begin  time.Time
	// ending is closed when the schedule is over: partitions heal.
	ending chan struct{}
	// awaited, when set, is what a test waits for beyond the schedule's
	// end, up to overtime: on a loaded machine the schedule's steps run
	// late, and a test that checks that something happened must not fail
	// only because the history ended first.
	awaited func() bool
	// copyHeld is set once a pod of a restored copy was granted the fence.
	copyHeld atomic.Bool
	// held is set, by cluster, once one of its pods was granted the fence.
	held []atomic.Bool
	// keptLeases counts the holders' answers that kept their lease.
	keptLeases atomic.Int64
	// background runs the steps that outlast their start: partitions and
	// terminating pods.
	background sync.WaitGroup
	// evaluating admits one admission evaluation at a time, whatever the
	// number of pods: the agents and the authority (in production on
	// other machines) keep the other core. Without it, a history with
	// many pods spends both cores on the policies under the race detector,
	// and every declaration misses its deadline for as long as it runs.
	evaluating chan struct{}
	// rolling serializes the rollouts of each cluster.
	rolling []sync.Mutex

	mu     sync.Mutex
	events []Event
	// serving are each cluster's current pods, by replica slot.
	serving [][]*pod
	all     []*pod
	counter []int
	// world is the clusters' Kubernetes side: the held objects, their
	// actuators, the hold controllers and the gated writers.
	world *world
	// calls are the agents' declarations and releases.
	calls callLog
	// nemeses counts what the nemeses of the actions did.
	nemeses nemesisCounts
	// unordered drops the handover order (AwaitHandover): a holder told
	// CLUSTER_FENCED releases at once, as before the order, so that a
	// broken engine is still released from.
	unordered bool
	// policyDirs are each cluster's policy directory (its ConfigMap),
	// which the policy nemesis breaks and mends.
	policyDirs []string
	// clients are the clients of the operator and the hostile callers,
	// by identity.
	clients map[string]fencev1.FenceServiceClient
	// epochs are the epochs each cluster's next pods declare, by domain:
	// its Fences' epochs.
	epochs [][]uint64
	// generations are the cluster generations each cluster's Fences show,
	// by domain: the newest its pods were given, which its next pods start
	// with and its pods adopt, as fencegate's Fence status does.
	generations [][]uint64
	// copies counts the restored copies of each cluster started.
	copies []int
}

// instance is the pod's instance name, as the chart names it.
func (p *pod) instance() string { return strings.ReplaceAll(p.name, "/", "-") }

func newRun(t *testing.T, srv *lab, sched schedule, bodies []review, wrap writerWrap) *run {
	r := &run{
		t: t, srv: srv, sched: sched, wrap: wrap,
		ending:     make(chan struct{}),
		evaluating: make(chan struct{}, 1),
		rolling:    make([]sync.Mutex, len(clusterNames)),
		serving:    make([][]*pod, len(clusterNames)),
		counter:    make([]int, len(clusterNames)),
		held:       make([]atomic.Bool, len(clusterNames)),

		epochs:      make([][]uint64, len(clusterNames)),
		generations: make([][]uint64, len(clusterNames)),
		copies:      make([]int, len(clusterNames)),
	}
	for d := range max(sched.domains, 1) {
		name := "h-" + strconv.FormatUint(sched.seed, 36)
		if d > 0 {
			name += "-" + strconv.Itoa(d)
		}
		r.domains = append(r.domains, name)
		r.bodies = append(r.bodies, inDomain(t, bodies, name))
	}
	shipped, err := policies.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	for range clusterNames {
		dir := t.TempDir()
		for name, src := range shipped {
			if err := os.WriteFile(filepath.Join(dir, name), src, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		r.policyDirs = append(r.policyDirs, dir)
	}
	for c := range clusterNames {
		r.generations[c] = make([]uint64, len(r.domains))
		for d := range r.domains {
			r.epochs[c] = append(r.epochs[c], sched.firstEpoch(c, d))
		}
	}
	return r
}

func (r *run) since() time.Duration { return time.Since(r.begin) }

// event records something that happened now.
func (r *run) event(format string, args ...any) {
	at := r.since()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{At: at, What: fmt.Sprintf(format, args...)})
}

// sleepUntil waits until the schedule's time at; steps are placed in time,
// nothing is synchronised by it.
func (r *run) sleepUntil(at time.Duration) {
	if d := at - r.since(); d > 0 {
		time.Sleep(d)
	}
}

// play runs the schedule and returns what happened.
func (r *run) play() History {
	r.begin = time.Now()
	r.world = newWorld(r)
	for i, clk := range r.srv.clocks {
		var offset time.Duration
		if i < len(r.sched.offsets) {
			offset = r.sched.offsets[i]
		}
		clk.set(offset)
	}
	for c := range clusterNames {
		for range r.sched.replicas {
			// A pod's agent reads serving (newGeneration) as soon as it
			// starts: serving changes under mu only.
			p := r.startPod(c, slices.Clone(r.epochs[c]), nil)
			r.mu.Lock()
			r.serving[c] = append(r.serving[c], p)
			r.mu.Unlock()
		}
	}
	r.world.start()
	for _, st := range r.sched.steps {
		r.sleepUntil(st.at)
		for st.awaits != nil && !st.awaits() && r.since() < st.at+overtime {
			time.Sleep(20 * time.Millisecond)
		}
		switch st.kind {
		case raise:
			r.background.Go(func() { r.rollout(st) })
		case failover:
			r.background.Go(func() { r.failover(st) })
		case partition:
			r.partition(st)
		case operate:
			r.operate(st)
		case restart:
			// On the test's goroutine: Restart fails the test if the
			// authority cannot come back.
			r.event("the authority restarts")
			r.srv.Restart(r.t)
			r.event("the authority is back")
		case clockStep:
			r.srv.clocks[st.replica%len(r.srv.clocks)].step(st.length)
			r.event("%s", st)
		case restore:
			r.restore(st)
		case leaseFail:
			r.leaseFail(st)
		case brokenPolicy:
			r.breakPolicy(st)
		case relabel:
			r.relabel(st)
		case failback:
			r.failback(st)
		}
	}
	r.sleepUntil(r.sched.end)
	for deadline := r.sched.end + overtime; r.awaited != nil && !r.awaited() && r.since() < deadline; {
		time.Sleep(20 * time.Millisecond)
	}
	if r.awaited != nil {
		// What happened is admitted on for a moment before the end.
		r.sleepUntil(r.since() + r.sched.declareInterval())
	}
	close(r.ending)
	r.background.Wait()
	r.world.end()
	return r.stop()
}

// startPod starts a replica of cluster c declaring epochs (by domain), or
// of a copy of c restored from backup b.
func (r *run) startPod(c int, epochs []uint64, b *backup) *pod {
	r.mu.Lock()
	r.counter[c]++
	p := &pod{
		name: fmt.Sprintf("%s/%d", clusterNames[c], r.counter[c]), cluster: c, uid: r.sched.uids[c],
		epochs: epochs, agents: make([]*fenceagent.ClusterFence, len(r.domains)), tokens: make([][]uint64, len(r.domains)),
		handingOver: make([]atomic.Bool, len(r.domains)),
	}
	p.actor, p.restored = p.uid, b != nil
	generations := slices.Clone(r.generations[c])
	if b != nil {
		p.name = fmt.Sprintf("%s-%s/%d", clusterNames[c], b.label, r.counter[c])
		p.actor, generations = p.uid+"#"+b.label, b.generations
	}
	// The pods of a cluster are spread over the authority's replicas;
	// every other one sends each call to the next of two replicas in turn,
	// as behind a load balancer that balances calls, not connections: its
	// answers then come from replicas whose records differ.
	targets := []string{r.srv.addrs[len(r.all)%len(r.srv.addrs)]}
	if len(r.srv.addrs) > 1 && len(r.all)%2 == 1 {
		targets = append(targets, r.srv.addrs[(len(r.all)+1)%len(r.srv.addrs)])
	}
	r.all = append(r.all, p)
	r.mu.Unlock()

	var err error
	// A restored copy is another API server: its policies are its own
	// (the shipped ones), and its namespaces name the same domains.
	kc := r.world.clusters[c]
	policyDir := r.policyDirs[c]
	if b != nil {
		policyDir = ""
	}
	if p.engine, err = engine.New(engine.Options{
		Domains: r.domains, Logger: logr.Discard(), PolicyDir: policyDir, Namespaces: namespaceView{kc, kc.gateDelay},
		// As fencegate run passes the hold controller's kinds: a revision
		// whose hold decision fails for one of them is refused.
		HoldKinds: heldResources(),
	}); err != nil {
		r.t.Errorf("%s: engine: %v", p.name, err)
		return p
	}
	var conns []*grpc.ClientConn
	var clients []fencev1.FenceServiceClient
	closeConns := func() {
		for _, conn := range conns {
			_ = conn.Close()
		}
	}
	for _, target := range targets {
		proxy, err := tcpproxy.Start(target)
		if err != nil {
			r.t.Errorf("%s: proxy: %v", p.name, err)
			closeConns()
			return p
		}
		p.proxies = append(p.proxies, proxy)
		conn, err := fenceagent.Dial(proxy.Addr(), r.srv.clientTLS(r.t, clusterID(clusterNames[c])))
		if err != nil {
			r.t.Errorf("%s: dial: %v", p.name, err)
			closeConns()
			return p
		}
		conns = append(conns, conn)
		clients = append(clients, fencev1.NewFenceServiceClient(conn))
	}
	agentCtx, stopAgents := context.WithCancel(context.Background())
	var agents sync.WaitGroup
	p.stopAgents = sync.OnceFunc(func() {
		stopAgents()
		agents.Wait()
		closeConns()
	})
	for d, name := range r.domains {
		var writer fencestate.Writer = p.engine
		if r.wrap != nil {
			writer = r.wrap(writer)
		}
		// Each agent calls the replicas in turn on its own.
		var client fencev1.FenceServiceClient = &recordingClient{FenceServiceClient: clients[0], r: r}
		if len(clients) > 1 {
			client = &recordingClient{FenceServiceClient: &callBalancer{FenceServiceClient: clients[0], clients: clients}, r: r}
		}
		// The handover order: a holder told CLUSTER_FENCED releases only
		// once its cluster's hold controller held every object of the
		// domain, quiet, and its Lease no longer publishes its hold. A
		// restored copy runs no actuators here.
		// Without the order (unordered), the wait returns at once. The
		// withdrawal that follows a wait is a handover's; one without it,
		// a pod's shutdown.
		var await func(context.Context, fencestate.State) error
		before := func(context.Context) error { return nil }
		if b == nil {
			await = func(ctx context.Context, _ fencestate.State) error {
				if !r.unordered {
					if err := kc.awaitHandover(ctx, name); err != nil {
						return err
					}
				}
				p.handingOver[d].Store(true)
				return nil
			}
			before = func(context.Context) error { return kc.withdraw(p, d, p.handingOver[d].Swap(false)) }
		}
		agent, err := fenceagent.New(fenceagent.Options{
			Client:          client,
			Writer:          &recorder{run: r, pod: p, domain: d, next: writer},
			Domain:          name,
			ClusterName:     clusterNames[c],
			ClusterUID:      p.uid,
			Epoch:           epochs[d],
			Instance:        p.instance(),
			DeclareInterval: r.sched.declareInterval(),
			DeclareTimeout:  r.sched.declareTimeout(),
			LeaseMargin:     leaseMargin,
			AwaitHandover:   await,
			BeforeRelease:   before,
			TakeoverGrace:   takeoverGrace,
			Logger:          logr.Discard(),
			Registerer:      prometheus.NewRegistry(),

			ClusterGeneration: generations[d],
		})
		if err != nil {
			r.t.Errorf("%s: agent of %s: %v", p.name, name, err)
			return p
		}
		p.agents[d] = agent
		agents.Go(func() {
			if err := agent.Start(agentCtx); err != nil {
				r.t.Errorf("%s: agent of %s: %v", p.name, name, err)
			}
		})
	}
	calls := ""
	if len(clients) > 1 {
		calls = ", " + balancedCalls
	}
	r.event("%s starts at epochs %v, generations %v%s", p.name, epochs, generations, calls)

	serveCtx, stopServing := context.WithCancel(context.Background())
	var workers sync.WaitGroup
	for range 2 {
		workers.Go(func() { r.admit(serveCtx, p) })
	}
	workers.Go(func() { r.commitLate(serveCtx, p) })
	p.stopServing = sync.OnceFunc(func() {
		stopServing()
		workers.Wait()
	})
	return p
}

// admit sends admission requests to p's engine until ctx ends, a little
// apart, and records every one that is admitted.
func (r *run) admit(ctx context.Context, p *pod) {
	for ctx.Err() == nil {
		d := rand.IntN(len(r.domains))
		b := r.bodies[d][rand.IntN(len(r.bodies[d]))]
		if !r.evaluate(ctx, p, d, b, 0) {
			return
		}
		time.Sleep(time.Duration(rand.IntN(1500)) * time.Microsecond)
	}
}

// commitLate is the nemesis of late commits: until ctx ends, a gated
// writer of p decides a write under one of the tokens p admitted with, and
// the write reaches the API server (the engine) up to two leases later,
// asserting that token; by then the fence may have moved on, and even
// come back to p's cluster. The policies must refuse it unless the token
// is still the fence's.
func (r *run) commitLate(ctx context.Context, p *pod) {
	for ctx.Err() == nil {
		time.Sleep(time.Duration(50+rand.IntN(250)) * time.Millisecond)
		d := rand.IntN(len(r.domains))
		p.mu.Lock()
		var token uint64
		if seen := p.tokens[d]; len(seen) > 0 {
			token = seen[rand.IntN(len(seen))]
		}
		p.mu.Unlock()
		if token == 0 {
			continue
		}
		b := r.bodies[d][rand.IntN(len(r.bodies[d]))]
		b.body = withWriteToken(r.t, b.body, token)
		select {
		case <-time.After(time.Duration(rand.Int64N(int64(2 * leaseTTL)))):
		case <-ctx.Done():
			return
		}
		if !r.evaluate(ctx, p, d, b, token) {
			return
		}
	}
}

// evaluate asks p's engine to admit b, a review of domain d's object that
// asserts write token asserted (0 for none), one evaluation of the run at
// a time so that the agents keep their share of the two cores, and records
// the outcome. It returns false once p can admit no more.
func (r *run) evaluate(ctx context.Context, p *pod, d int, b review, asserted uint64) bool {
	select {
	case r.evaluating <- struct{}{}:
	case <-ctx.Done():
		return true
	}
	start := r.since()
	res, err := p.engine.Admit(ctx, b.body)
	end := r.since()
	<-r.evaluating
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case errors.Is(err, engine.ErrNotReady), err != nil && ctx.Err() != nil:
	case err != nil:
		r.t.Errorf("%s: Admit: %v", p.name, err)
		return false
	case res.Decision.Allowed:
		p.admissions = append(p.admissions, Admission{
			Pod: p.name, Cluster: p.actor, Domain: r.domains[d], FenceDomain: res.Fence.Domain, Start: start, End: end,
			Token:  enginetest.StampedToken(res.Decision.Patch, b.token),
			Status: res.Fence.Status, Holder: res.Fence.Holder.UID, FenceToken: res.Fence.Token, Asserted: asserted,
		})
		if seen := p.tokens[d]; asserted == 0 && (len(seen) == 0 || seen[len(seen)-1] != res.Fence.Token) {
			p.tokens[d] = append(seen, res.Fence.Token)
		}
	case asserted != 0 && res.Decision.Reason == staleReason:
		p.denied++
		p.stale++
	default:
		p.denied++
	}
	return true
}

// staleReason is the reason of the denial of a write decided under an
// older fencing token than the fence's.
const staleReason = "STALE_FENCING_TOKEN"

// withWriteToken is body, an AdmissionReview, whose object asserts write
// token token (fencegate.dev/write-token), as a gated writer's does.
func withWriteToken(t testing.TB, body []byte, token uint64) []byte {
	t.Helper()
	var review map[string]any
	if err := json.Unmarshal(body, &review); err != nil {
		t.Fatalf("decode a review: %v", err)
	}
	request, _ := review["request"].(map[string]any)
	obj, _ := request["object"].(map[string]any)
	meta, _ := obj["metadata"].(map[string]any)
	annotations, _ := meta["annotations"].(map[string]any)
	if annotations == nil {
		annotations = map[string]any{}
		meta["annotations"] = annotations
	}
	annotations[writeTokenAnnotation] = strconv.FormatUint(token, 10)
	out, err := json.Marshal(review)
	if err != nil {
		t.Fatalf("encode a review: %v", err)
	}
	return out
}

// rollout replaces a cluster's pods with pods at a new epoch of one
// domain, as a Deployment rollout does: the new pods start, and once they
// are ready the old ones terminate, still answering (their agents running)
// for preStop, then answering from their last fence state for drain.
func (r *run) rollout(st step) {
	r.rolling[st.cluster].Lock()
	defer r.rolling[st.cluster].Unlock()
	r.event("rollout: %s", st)
	r.mu.Lock()
	r.epochs[st.cluster][st.domain] = st.epoch
	epochs := r.epochs[st.cluster]
	r.mu.Unlock()
	fresh := make([]*pod, r.sched.replicas)
	for i := range fresh {
		fresh[i] = r.startPod(st.cluster, slices.Clone(epochs), nil)
	}
	// Ready: the agents have an answer, or the authority is away and
	// the rollout goes on regardless after a while.
	deadline := time.Now().Add(leaseTTL)
	for _, p := range fresh {
		for _, agent := range p.agents {
			for agent != nil && agent.Status().Reason == fencestate.ReasonNoAnswerYet && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	r.mu.Lock()
	old := r.serving[st.cluster]
	r.serving[st.cluster] = fresh
	r.mu.Unlock()
	for _, p := range old {
		r.background.Go(func() {
			time.Sleep(st.preStop)
			if p.stopAgents != nil {
				p.stopAgents()
			}
			r.event("%s stopped its agents", p.name)
			time.Sleep(st.drain)
			if p.stopServing != nil {
				p.stopServing()
			}
			r.event("%s stopped answering", p.name)
		})
	}
}

// failover raises the epoch the running pods of a cluster declare for one
// domain, as each pod's Fence sync does once fencegate failover patched the
// Fence's spec.epoch: the agent declares it at once, without a restart.
// It waits for a rollout of the cluster in progress, whose new pods would
// otherwise start at the old epoch.
func (r *run) failover(st step) {
	r.rolling[st.cluster].Lock()
	defer r.rolling[st.cluster].Unlock()
	r.event("%s", st)
	r.mu.Lock()
	r.epochs[st.cluster][st.domain] = st.epoch
	pods := slices.Clone(r.serving[st.cluster])
	for _, p := range pods {
		p.epochs[st.domain] = st.epoch
	}
	r.mu.Unlock()
	for _, p := range pods {
		agent := p.agents[st.domain]
		if agent == nil {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), leaseTTL)
		err := agent.SetEpoch(ctx, st.epoch)
		cancel()
		if err != nil && !errors.Is(err, fenceagent.ErrStopped) {
			r.event("%s declares epoch %d of domain %d: %v", p.name, st.epoch, st.domain, err)
		}
	}
}

// partition cuts one pod's agent off the authority until the partition's
// length passed or the schedule ends.
func (r *run) partition(st step) {
	r.mu.Lock()
	p := r.serving[st.cluster][st.replica]
	r.mu.Unlock()
	if len(p.proxies) == 0 {
		return
	}
	for _, proxy := range p.proxies {
		proxy.Cut(st.mode)
	}
	r.event("%s is partitioned (%s)", p.name, st.mode)
	r.background.Go(func() {
		timer := time.NewTimer(st.length)
		defer timer.Stop()
		select {
		case <-timer.C:
		case <-r.ending:
		}
		for _, proxy := range p.proxies {
			proxy.Restore()
		}
		r.event("%s's partition heals", p.name)
	})
}

// stop ends every pod and returns the history.
func (r *run) stop() History {
	r.mu.Lock()
	pods := append([]*pod(nil), r.all...)
	r.mu.Unlock()
	// Stopped all at once: a partitioned agent's last release waits for
	// its timeout.
	var stopping sync.WaitGroup
	for _, p := range pods {
		stopping.Go(func() {
			if p.stopServing != nil {
				p.stopServing()
			}
			if p.stopAgents != nil {
				p.stopAgents()
			}
			for _, proxy := range p.proxies {
				proxy.Close()
			}
		})
	}
	stopping.Wait()
	h := History{Seed: r.sched.seed, KeptLeases: int(r.keptLeases.Load()), Actions: r.world.actions, Granted: r.calls.granted}
	h.Calls = r.calls.calls
	h.Grants = r.grants()
	w, n := r.world, &r.nemeses
	h.Counts = Counts{
		Runs: w.runs.Load(), Writes: w.writes.Load(), FencedWrites: w.fencedWrites.Load(), CancelledWrites: w.cancelledWrites.Load(), RefusedWrites: w.refusedWrites.Load(),
		HoldErrors: w.holdErrors.Load(), ResumeWaits: w.resumeWaits.Load(),
		HandoversAwaited: w.handoversAwaited.Load(), HandoverTimeouts: w.handoverTimeouts.Load(), WithdrawalsRefused: w.withdrawalsRefused.Load(),
		ShutdownWithdrawalsRefused: w.shutdownWithdrawalsRefused.Load(), LeaseFailures: n.leaseFailures.Load(),
		BrokenReloads: n.brokenReloads.Load(), RefusedReloads: n.refusedReloads.Load(),
		Relabels: n.relabels.Load(), AcrossHolders: n.acrossHolders.Load(), Failbacks: n.failbacks.Load(),
		CopyHeld: r.copyHeld.Load(),
	}
	for _, p := range pods {
		h.Admissions = append(h.Admissions, p.admissions...)
		h.Denied += p.denied
		h.Stale += p.stale
	}
	r.mu.Lock()
	h.Events = r.events
	r.mu.Unlock()
	return h
}

// recorder writes the fence states of a pod's domain through and records
// each change of status, holder or token (not every renewal).
type recorder struct {
	run    *run
	pod    *pod
	domain int
	next   fencestate.Writer

	mu   sync.Mutex
	last fencestate.State
	// lastActive is the last active state written.
	lastActive fencestate.State
}

func (w *recorder) WriteFence(ctx context.Context, s fencestate.State) error {
	err := w.next.WriteFence(ctx, s)
	if !w.pod.restored {
		w.run.newGeneration(w.pod.cluster, w.domain, s.ClusterGeneration)
		if err == nil {
			w.run.world.clusters[w.pod.cluster].publish(w.pod, w.domain, s)
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if s.Status == fencestate.Active {
		// A later answer that left the lease's end where it was: the
		// authority kept the lease.
		if p := w.lastActive; err == nil && p.Token == s.Token && p.ValidUntilNS == s.ValidUntilNS && p.LastSuccessNS < s.LastSuccessNS {
			w.run.keptLeases.Add(1)
		}
		w.lastActive = s
	}
	if err == nil && s.Status == w.last.Status && s.Holder == w.last.Holder && s.Token == w.last.Token && s.Reason == w.last.Reason {
		return nil
	}
	w.last = s
	switch {
	case s.Status != fencestate.Active:
	case w.pod.restored:
		w.run.copyHeld.Store(true)
	default:
		w.run.held[w.pod.cluster].Store(true)
	}
	what := fmt.Sprintf("%s wrote %s", w.pod.name, s.Status)
	if len(w.run.domains) > 1 {
		what = fmt.Sprintf("%s wrote %s in domain %d", w.pod.name, s.Status, w.domain)
	}
	if s.Holder.Name != "" {
		what += fmt.Sprintf(", holder %s@%d", s.Holder.Name, s.Holder.Epoch)
	}
	if s.Status == fencestate.Active {
		what += fmt.Sprintf(", token %d, valid for %s", s.Token, time.Until(time.Unix(0, s.ValidUntilNS)).Round(time.Millisecond))
	} else if s.Reason != "" {
		what += " (" + s.Reason + ")"
	}
	if err != nil {
		what += fmt.Sprintf(": %v", err)
	}
	w.run.event("%s", what)
	return err
}

// newGeneration is what fencegate's Fence status does with a generation a
// pod of cluster c was given in domain d: the domain's Fence shows the
// newest, and every pod of the cluster adopts it.
func (r *run) newGeneration(c, d int, g uint64) {
	r.mu.Lock()
	if g <= r.generations[c][d] {
		r.mu.Unlock()
		return
	}
	r.generations[c][d] = g
	pods := slices.Clone(r.serving[c])
	r.mu.Unlock()
	for _, p := range pods {
		if agent := p.agents[d]; agent != nil {
			agent.AdoptClusterGeneration(g)
		}
	}
}

// balancedCalls marks, in its start's event, a pod that calls two replicas.
const balancedCalls = "calling two replicas in turn"

// callBalancer sends each declaration and release to the next of its
// clients in turn, and the rest (the fence's watch) to the first.
type callBalancer struct {
	fencev1.FenceServiceClient
	clients []fencev1.FenceServiceClient
	next    atomic.Uint64
}

func (b *callBalancer) pick() fencev1.FenceServiceClient {
	return b.clients[(b.next.Add(1)-1)%uint64(len(b.clients))]
}

func (b *callBalancer) DeclareClusterEpoch(ctx context.Context, req *fencev1.DeclareClusterEpochRequest, opts ...grpc.CallOption) (*fencev1.DeclareClusterEpochResponse, error) {
	return b.pick().DeclareClusterEpoch(ctx, req, opts...)
}

func (b *callBalancer) ReleaseFence(ctx context.Context, req *fencev1.ReleaseFenceRequest, opts ...grpc.CallOption) (*fencev1.ReleaseFenceResponse, error) {
	return b.pick().ReleaseFence(ctx, req, opts...)
}
