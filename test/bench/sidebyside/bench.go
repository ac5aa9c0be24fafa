package sidebyside

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/bench/benchdata"
	"github.com/fencegate/fencegate/test/stack"
	"github.com/fencegate/fencegate/webhook"
)

// The two fence states measured: the cluster that holds the fence (its
// CREATEs and UPDATEs are allowed and stamped) and a fenced one (they are
// denied).
const (
	stateActive = "active"
	stateFenced = "fenced"
)

// The servers compared, the floor under both, and the allow-all webhook
// (the baselines, which decide nothing).
const (
	fencegateServer = benchdata.Fencegate
	opaServerName   = benchdata.OPAServer
	floorServer     = benchdata.Floor
	allowAllServer  = benchdata.AllowAll
)

// scenario is one endpoint deciding for one fence state.
type scenario struct {
	Endpoint endpoint
	State    string
}

func (s scenario) String() string {
	if s == (scenario{}) {
		return "no decision" // a baseline
	}
	return fmt.Sprintf("%s, %s", s.Endpoint, s.State)
}

// scenarios are measured in this order in every round.
var scenarios = []scenario{
	{validate, stateActive}, {validate, stateFenced},
	{mutate, stateActive}, {mutate, stateFenced},
}

// server is one of the servers compared, with its endpoint for each
// scenario.
type server struct {
	name    string
	targets map[scenario]target
}

// measurement is what one round measured for one server and scenario.
type measurement struct {
	Round    int
	Server   string
	Scenario scenario
	// Saturation is the closed-loop run over kept-alive connections,
	// Latency the fixed-rate run.
	Saturation, Latency loadResult
	// Warmups are the unmeasured runs before them, checked all the same.
	Warmups []loadResult
	// Memory is the server process's after the runs.
	Memory memory
	// Attempts is how many times the runs were made (more than one when
	// other processes disturbed them).
	Attempts int
}

// problems returns the failed and wrong answers of every run of m, and the
// number of requests.
func (m measurement) problems() (failed, wrong, requests int, first string) {
	for _, r := range append([]loadResult{m.Saturation, m.Latency}, m.Warmups...) {
		failed, wrong, requests = failed+r.Failed, wrong+r.Wrong, requests+r.Requests
		if first == "" {
			first = r.FirstProblem
		}
	}
	return failed, wrong, requests, first
}

// foreignCores is the most cores that processes outside the benchmark kept
// busy during one of m's measured runs.
func (m measurement) foreignCores() float64 {
	return max(m.Saturation.ForeignCores(), m.Latency.ForeignCores())
}

// stackCores is the most cores that the idle parts of the stack kept busy
// during one of m's measured runs.
func (m measurement) stackCores() float64 {
	return max(m.Saturation.StackCores(), m.Latency.StackCores())
}

// churnRun is a fixed-rate run of validate (active) with a new TLS
// connection per request.
type churnRun struct {
	Round  int
	Server string
	Result loadResult
}

// curveRun is a fixed-rate run of the latency curve: validate (active), or
// a baseline, at one of Options.Rates.
type curveRun struct {
	Round  int
	Server string
	Rate   int
	// Result is the measured run; Warmup the unmeasured one before it,
	// checked all the same.
	Result, Warmup loadResult
}

// problems returns the failed and wrong answers of c's runs, warm-up
// included, and the number of requests.
func (c curveRun) problems() (failed, wrong, requests int) {
	return c.Result.Failed + c.Warmup.Failed, c.Result.Wrong + c.Warmup.Wrong, c.Result.Requests + c.Warmup.Requests
}

// curveScenario is the scenario of the latency curve: the fence holder's
// validating webhook, the one every write in a cluster goes through.
var curveScenario = scenario{validate, stateActive}

// environment describes where and how the figures were measured.
type environment struct {
	// Started and Finished bound the measurements.
	Started, Finished time.Time
	// LoadBefore and LoadAfter are the 1-minute load averages.
	LoadBefore, LoadAfter float64
	// CPU and Cores describe the machine.
	CPU   string
	Cores int
	// GoVersion built the bench, fencegate and opa; OPAVersion is opa's.
	GoVersion, OPAVersion string
	// Commit is the checkout measured.
	Commit string
	// Reviews is how many reviews were sent in turn, CreateBytes and
	// UpdateBytes the mean size of their bodies.
	Reviews, CreateBytes, UpdateBytes int
	// OPAReadOptimizedArg is whether OPA ran with
	// --optimize-store-for-read-speed.
	OPAReadOptimizedArg bool
	// LogFormat is fencegate's --log-format.
	LogFormat string
}

// results are everything report prints.
type results struct {
	Env          environment
	Measurements []measurement
	// Baselines are the floor's and the allow-all webhook's
	// measurements, one each per round.
	Baselines []measurement
	Churn     []churnRun
	// Curve are the runs of the latency curve, when Options.Rates asks
	// for one.
	Curve []curveRun
}

// bench holds the servers under test and what they must answer.
type bench struct {
	o        Options
	say      func(string, ...any)
	reviews  []review
	expected map[scenario]expected
	servers  []*server
	procs    []*serverProcess
	// baselines are the servers that decide nothing: the floor, then the
	// allow-all webhook.
	baselines []namedTarget
	opaBin    string
	root      string
	// retryLeft is how much time may still go to measuring disturbed
	// runs again.
	retryLeft time.Duration
}

// newBench prepares the reviews and their expected answers, starts an OPA
// server per fence state, and checks that every server answers every review
// as expected before anything is measured.
func newBench(ctx context.Context, o Options, root string, s *stack.Stack, say func(string, ...any)) (*bench, error) {
	b := &bench{o: o, say: say, root: root, opaBin: filepath.Join(root, ".cache", "bin", "opa"), retryLeft: o.RetryBudget}
	var err error
	if b.reviews, err = buildReviews(o.Reviews); err != nil {
		return b, err
	}
	active, fenced, err := fenceStates(ctx, s.Fence, "east", "west")
	if err != nil {
		return b, err
	}
	eastPid, err := findProcess(s.Binary, "--cluster-name", "east")
	if err != nil {
		return b, fmt.Errorf("fencegate of east: %w", err)
	}
	configFile, config, err := clusterConfig(eastPid)
	if err != nil {
		return b, err
	}

	b.expected = map[scenario]expected{}
	fg := &server{name: fencegateServer, targets: map[scenario]target{}}
	opa := &server{name: opaServerName, targets: map[scenario]target{}}
	for _, c := range []struct {
		state, cluster string
		fence          fencestate.State
		allowed        bool
	}{{stateActive, "east", active, true}, {stateFenced, "west", fenced, false}} {
		ref, err := newReference(ctx, c.fence, config)
		if err != nil {
			return b, err
		}
		want, err := expect(ctx, ref, b.reviews, c.allowed)
		if err != nil {
			return b, fmt.Errorf("the %s cluster's expected answers: %w", c.state, err)
		}
		cl := s.Cluster(c.cluster)
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: reviewNamespace}}
		if err := cl.ControlPlane.Client.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			return b, fmt.Errorf("namespace %s of %s: %w", reviewNamespace, c.cluster, err)
		}
		fgTLS, err := clientTLS(cl.WebhookCA)
		if err != nil {
			return b, fmt.Errorf("fencegate of %s: %w", c.cluster, err)
		}
		fgPid, err := findProcess(s.Binary, "--cluster-name", c.cluster)
		if err != nil {
			return b, fmt.Errorf("fencegate of %s: %w", c.cluster, err)
		}
		say("starting OPA's server for the %s cluster's data.fence …", c.state)
		srv, err := startOPA(ctx, opaOptions{
			Binary: b.opaBin, Dir: filepath.Join(s.Dir, "opa-"+c.cluster),
			Fence: c.fence, ConfigFile: configFile, ReadOptimizedStore: o.ReadOptimal,
		})
		if err != nil {
			return b, err
		}
		b.procs = append(b.procs, srv)
		opaTLS, err := clientTLS(srv.CA)
		if err != nil {
			return b, err
		}
		for ep, paths := range map[endpoint][2]string{
			validate: {webhook.PathValidate, opaValidatePath},
			mutate:   {webhook.PathMutate, opaMutatePath},
		} {
			sc := scenario{ep, c.state}
			b.expected[sc] = want[ep]
			fg.targets[sc] = target{URL: "https://" + cl.WebhookAddr + paths[0], TLS: fgTLS, Pid: fgPid, Pprof: cl.Replicas[0].Pprof}
			opa.targets[sc] = target{URL: "https://" + srv.Addr + paths[1], TLS: opaTLS, Pid: srv.Pid()}
		}
	}
	b.servers = []*server{fg, opa}
	allowed := allowEvery(b.reviews)
	for _, bl := range []struct {
		name  string
		check func() answerCheck
	}{
		{floorServer, func() answerCheck { return exactAnswer(floorAnswer) }},
		{allowAllServer, func() answerCheck { return newChecker(validate, allowed) }},
	} {
		say("starting the %s …", bl.name)
		p, err := startBaseline(ctx, filepath.Join(s.Dir, strings.ReplaceAll(bl.name, " ", "-")), bl.name)
		if err != nil {
			return b, err
		}
		b.procs = append(b.procs, p)
		cfg, err := clientTLS(p.CA)
		if err != nil {
			return b, err
		}
		b.baselines = append(b.baselines, namedTarget{bl.name, target{URL: "https://" + p.Addr + "/", TLS: cfg, Pid: p.Pid()}, bl.check})
	}
	say("checking that both servers answer every review as the shipped policies decide …")
	return b, b.smokeTest(ctx)
}

// namedTarget is a server's endpoint, by the server's name, and what its
// answers must be.
type namedTarget struct {
	name  string
	t     target
	check func() answerCheck
}

// smokeTest sends every review once to every endpoint and checks the answer.
func (b *bench) smokeTest(ctx context.Context) error {
	for _, srv := range b.servers {
		for _, sc := range scenarios {
			t := srv.targets[sc]
			client := newClient(t, true, 1)
			chk := newChecker(sc.Endpoint, b.expected[sc])
			for _, r := range b.reviews {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(r.Body))
				if err != nil {
					return fmt.Errorf("%s %s: %w", srv.name, sc, err)
				}
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return fmt.Errorf("%s %s: %w", srv.name, sc, err)
				}
				body, err := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if err != nil {
					return fmt.Errorf("%s %s: %w", srv.name, sc, err)
				}
				if err := chk.check(resp.StatusCode, body); err != nil {
					return fmt.Errorf("%s %s, %s of %s: %w", srv.name, sc, r.Operation, r.UID, err)
				}
			}
			client.CloseIdleConnections()
		}
	}
	return nil
}

// measure runs the rounds.
func (b *bench) measure(ctx context.Context) (results, error) {
	res := results{Env: b.environment()}
	res.Env.LoadBefore, _ = loadAverage()
	b.say("load average before measuring: %.2f", res.Env.LoadBefore)
	for round := 1; round <= b.o.Rounds; round++ {
		order := slices.Clone(b.servers)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		b.say("round %d of %d (%s first)", round, b.o.Rounds, order[0].name)
		for _, sc := range scenarios {
			for _, srv := range order {
				if err := ctx.Err(); err != nil {
					return res, err
				}
				want := b.expected[sc]
				m, err := b.measureTarget(round, srv.name, sc, srv.targets[sc], func() answerCheck { return newChecker(sc.Endpoint, want) })
				if err != nil {
					return res, fmt.Errorf("round %d, %s, %s: %w", round, srv.name, sc, err)
				}
				res.Measurements = append(res.Measurements, m)
			}
		}
		for _, bl := range b.baselines {
			m, err := b.measureTarget(round, bl.name, scenario{}, bl.t, bl.check)
			if err != nil {
				return res, fmt.Errorf("round %d, %s: %w", round, bl.name, err)
			}
			res.Baselines = append(res.Baselines, m)
		}
		curve, err := b.curve(ctx, round, order)
		if err != nil {
			return res, fmt.Errorf("round %d, latency curve: %w", round, err)
		}
		res.Curve = append(res.Curve, curve...)
		if b.o.Churn == 0 {
			continue
		}
		for _, srv := range order {
			c, err := b.churnRun(srv)
			if err != nil {
				return res, fmt.Errorf("round %d, %s, connection churn: %w", round, srv.name, err)
			}
			b.say("  %-17s churn %d req/s   p50 %6.3f  p99 %6.3f ms   errors %d/%d",
				srv.name, b.o.ChurnRate, ms(c.Percentile(0.5)), ms(c.Percentile(0.99)), c.Failed+c.Wrong, c.Requests)
			res.Churn = append(res.Churn, churnRun{Round: round, Server: srv.name, Result: c})
		}
	}
	res.Env.LoadAfter, _ = loadAverage()
	res.Env.Finished = time.Now()
	return res, nil
}

// measureTarget measures one target: saturation, then the fixed rate, each
// after a warm-up on the same connections, every answer checked by a
// checker from newCheck. A measurement that processes outside the bench
// disturbed is made again, within the retries and the retry time allowed.
func (b *bench) measureTarget(round int, name string, sc scenario, t target, newCheck func() answerCheck) (measurement, error) {
	cost := 2*b.o.Warmup + b.o.Saturation + b.o.Latency
	label := sc.String()
	for attempt := 1; ; attempt++ {
		m := measurement{Round: round, Server: name, Scenario: sc, Attempts: attempt}
		chk := newCheck()
		sat := loadSpec{Workers: b.o.Connections, Duration: b.o.Saturation}
		fixed := loadSpec{Rate: b.o.Rate, Workers: b.o.Connections, Duration: b.o.Latency}

		client := newClient(t, true, b.o.Connections)
		warm, err := b.warm(client, t, chk, sat)
		if err != nil {
			return m, err
		}
		m.Warmups = append(m.Warmups, warm)
		profile := b.startProfile(round, name, sc, attempt, t)
		if m.Saturation, err = attack(client, t, b.reviews, chk, sat); err != nil {
			return m, err
		}
		if err := profile(); err != nil {
			return m, err
		}
		client.CloseIdleConnections()

		// The fixed rate goes over as many kept-alive connections: a
		// request that finds them all busy waits for one (and its wait
		// counts in its latency) rather than opening another, so that a
		// server falling behind is not also handed a storm of handshakes.
		client = newClient(t, true, b.o.Connections)
		if warm, err = b.warm(client, t, chk, fixed); err != nil {
			return m, err
		}
		m.Warmups = append(m.Warmups, warm)
		if m.Latency, err = attack(client, t, b.reviews, chk, fixed); err != nil {
			return m, err
		}
		client.CloseIdleConnections()
		if m.Memory, err = readMemory(t.Pid); err != nil {
			return m, err
		}
		failed, wrong, requests, first := m.problems()
		b.say("  %-17s %-16s %7.0f req/s   p50 %6.3f  p90 %6.3f  p99 %6.3f ms   foreign cores %.2f   errors %d/%d",
			name, label, m.Saturation.Throughput(), ms(m.Latency.Percentile(0.5)), ms(m.Latency.Percentile(0.9)),
			ms(m.Latency.Percentile(0.99)), m.foreignCores(), failed+wrong, requests)
		if first != "" {
			b.say("    first problem: %s", first)
		}
		if m.foreignCores() <= b.o.MaxForeign || attempt > b.o.Retries || b.retryLeft < cost {
			return m, nil
		}
		b.retryLeft -= cost
		b.say("    processes outside the benchmark kept %.2f cores busy: measuring again", m.foreignCores())
	}
}

// warm runs spec for the warm-up time, when there is one.
func (b *bench) warm(client *http.Client, t target, chk answerCheck, spec loadSpec) (loadResult, error) {
	if b.o.Warmup == 0 {
		return loadResult{}, nil
	}
	spec.Duration = b.o.Warmup
	return attack(client, t, b.reviews, chk, spec)
}

// curve measures, at each of the curve's rates, validate (active) on each
// server in order and then the baselines, each after a warm-up on the same
// kept-alive connections.
func (b *bench) curve(ctx context.Context, round int, order []*server) ([]curveRun, error) {
	var targets []namedTarget
	for _, srv := range order {
		want := b.expected[curveScenario]
		targets = append(targets, namedTarget{srv.name, srv.targets[curveScenario],
			func() answerCheck { return newChecker(curveScenario.Endpoint, want) }})
	}
	targets = append(targets, b.baselines...)
	var runs []curveRun
	for _, rate := range b.o.Rates {
		for _, ct := range targets {
			if err := ctx.Err(); err != nil {
				return runs, err
			}
			spec := loadSpec{Rate: rate, Workers: b.o.Connections, Duration: b.o.CurveDuration}
			client := newClient(ct.t, true, b.o.Connections)
			chk := ct.check()
			warm, err := b.warm(client, ct.t, chk, spec)
			if err != nil {
				return runs, fmt.Errorf("%s at %d req/s: %w", ct.name, rate, err)
			}
			r, err := attack(client, ct.t, b.reviews, chk, spec)
			client.CloseIdleConnections()
			if err != nil {
				return runs, fmt.Errorf("%s at %d req/s: %w", ct.name, rate, err)
			}
			c := curveRun{Round: round, Server: ct.name, Rate: rate, Result: r, Warmup: warm}
			failed, wrong, requests := c.problems()
			b.say("  %-17s curve %5d req/s   p50 %6.3f  p99 %6.3f ms   foreign cores %.2f   errors %d/%d",
				ct.name, rate, ms(r.Percentile(0.5)), ms(r.Percentile(0.99)), r.ForeignCores(), failed+wrong, requests)
			runs = append(runs, c)
		}
	}
	return runs, nil
}

// churnRun measures validate (active) at the churn rate with a new TLS
// connection for every request.
func (b *bench) churnRun(srv *server) (loadResult, error) {
	sc := scenario{validate, stateActive}
	t := srv.targets[sc]
	client := newClient(t, false, 0)
	defer client.CloseIdleConnections()
	return attack(client, t, b.reviews, newChecker(sc.Endpoint, b.expected[sc]), loadSpec{Rate: b.o.ChurnRate, Workers: b.o.Connections, Duration: b.o.Churn})
}

// environment records the machine, versions and reviews.
func (b *bench) environment() environment {
	env := environment{
		Started: time.Now(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(),
		CPU: cpuModel(), Reviews: len(b.reviews), OPAReadOptimizedArg: b.o.ReadOptimal, LogFormat: b.o.LogFormat,
	}
	if out, err := exec.Command(b.opaBin, "version").Output(); err == nil {
		first, _, _ := strings.Cut(string(out), "\n")
		env.OPAVersion = strings.TrimSpace(strings.TrimPrefix(first, "Version:"))
	}
	git := exec.Command("git", "describe", "--always", "--dirty")
	git.Dir = b.root
	if out, err := git.Output(); err == nil {
		env.Commit = strings.TrimSpace(string(out))
	}
	var creates, updates, nc, nu int
	for _, r := range b.reviews {
		if r.Operation == "CREATE" {
			creates, nc = creates+len(r.Body), nc+1
		} else {
			updates, nu = updates+len(r.Body), nu+1
		}
	}
	env.CreateBytes, env.UpdateBytes = creates/max(nc, 1), updates/max(nu, 1)
	return env
}

// stop stops the OPA servers and the baselines.
func (b *bench) stop() error {
	var errs []error
	for _, s := range b.procs {
		errs = append(errs, s.Stop(stopGrace))
	}
	return errors.Join(errs...)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// isBaseline says whether the server named so decides nothing.
func isBaseline(name string) bool {
	return name == floorServer || name == allowAllServer
}
