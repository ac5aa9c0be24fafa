package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/stack"
)

// The two fence states measured: the cluster that holds the fence (its
// CREATEs and UPDATEs are allowed and stamped) and a fenced one (they are
// denied).
const (
	stateActive = "active"
	stateFenced = "fenced"
)

// The servers compared.
const (
	fencegateServer = "fencegate"
	opaServerName   = "OPA server"
)

// scenario is one endpoint deciding for one fence state.
type scenario struct {
	Endpoint endpoint
	State    string
}

func (s scenario) String() string { return fmt.Sprintf("%s, %s", s.Endpoint, s.State) }

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
	// PeakRSS is the server process's VmHWM after the runs.
	PeakRSS uint64
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

// environment describes where and how the figures were measured.
type environment struct {
	Started, Finished   time.Time
	LoadBefore          float64
	LoadAfter           float64
	CPU                 string
	Cores               int
	GoVersion           string
	OPAVersion          string
	Commit              string
	CreateBytes         int
	UpdateBytes         int
	Reviews             int
	OPAReadOptimizedArg bool
}

// results are everything report prints.
type results struct {
	Env          environment
	Measurements []measurement
	Churn        []churnRun
}

// bench holds the servers under test and what they must answer.
type bench struct {
	o        options
	say      func(string, ...any)
	reviews  []review
	expected map[scenario]expected
	servers  []*server
	opas     []*opaServer
	opaBin   string
	root     string
}

// newBench prepares the reviews and their expected answers, starts an OPA
// server per fence state, and checks that every server answers every review
// as expected before anything is measured.
func newBench(ctx context.Context, o options, root string, s *stack.Stack, say func(string, ...any)) (*bench, error) {
	b := &bench{o: o, say: say, root: root, opaBin: filepath.Join(root, ".cache", "bin", "opa")}
	var err error
	if b.reviews, err = buildReviews(o.reviews); err != nil {
		return b, err
	}
	active, fenced, err := fenceStates(ctx, s.Fence, "east", "west")
	if err != nil {
		return b, err
	}
	configFile, config, err := stackConfig(s)
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
		decider, err := newOracle(ctx, c.fence, config)
		if err != nil {
			return b, err
		}
		want, err := expect(ctx, decider, b.reviews, c.allowed)
		if err != nil {
			return b, fmt.Errorf("the %s cluster's expected answers: %w", c.state, err)
		}
		cl := s.Cluster(c.cluster)
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
			Fence: c.fence, ConfigFile: configFile, ReadOptimizedStore: o.readOptimal,
		})
		if err != nil {
			return b, err
		}
		b.opas = append(b.opas, srv)
		opaTLS, err := clientTLS(srv.CA)
		if err != nil {
			return b, err
		}
		for ep, paths := range map[endpoint][2]string{
			validate: {"/validate", opaValidatePath},
			mutate:   {"/mutate", opaMutatePath},
		} {
			sc := scenario{ep, c.state}
			b.expected[sc] = want[ep]
			fg.targets[sc] = target{URL: "https://" + cl.WebhookAddr + paths[0], TLS: fgTLS, Pid: fgPid}
			opa.targets[sc] = target{URL: "https://" + srv.Addr + paths[1], TLS: opaTLS, Pid: srv.Pid()}
		}
	}
	b.servers = []*server{fg, opa}
	say("checking that both servers answer every review as the shipped policies decide …")
	return b, b.smokeTest(ctx)
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
	for round := 1; round <= b.o.rounds; round++ {
		order := slices.Clone(b.servers)
		if round%2 == 0 {
			slices.Reverse(order)
		}
		b.say("round %d of %d (%s first)", round, b.o.rounds, order[0].name)
		for _, sc := range scenarios {
			for _, srv := range order {
				if err := ctx.Err(); err != nil {
					return res, err
				}
				m, err := b.measureScenario(round, srv, sc)
				if err != nil {
					return res, fmt.Errorf("round %d, %s, %s: %w", round, srv.name, sc, err)
				}
				failed, wrong, requests, first := m.problems()
				b.say("  %-10s %-16s %7.0f req/s   p50 %6.3f  p90 %6.3f  p99 %6.3f ms   foreign cores %.2f   errors %d/%d",
					srv.name, sc, m.Saturation.Throughput(), ms(m.Latency.Percentile(0.5)), ms(m.Latency.Percentile(0.9)),
					ms(m.Latency.Percentile(0.99)), m.foreignCores(), failed+wrong, requests)
				if first != "" {
					b.say("    first problem: %s", first)
				}
				res.Measurements = append(res.Measurements, m)
			}
		}
		if b.o.churn == 0 {
			continue
		}
		for _, srv := range order {
			c, err := b.churnRun(srv)
			if err != nil {
				return res, fmt.Errorf("round %d, %s, connection churn: %w", round, srv.name, err)
			}
			b.say("  %-10s churn %d req/s   p50 %6.3f  p99 %6.3f ms   errors %d/%d",
				srv.name, b.o.churnRate, ms(c.Percentile(0.5)), ms(c.Percentile(0.99)), c.Failed+c.Wrong, c.Requests)
			res.Churn = append(res.Churn, churnRun{Round: round, Server: srv.name, Result: c})
		}
	}
	res.Env.LoadAfter, _ = loadAverage()
	res.Env.Finished = time.Now()
	return res, nil
}

// measureScenario measures one server's scenario: saturation, then the
// fixed rate, each after a warm-up on the same connections. A measurement
// that other processes disturbed is made again, up to the retries allowed.
func (b *bench) measureScenario(round int, srv *server, sc scenario) (measurement, error) {
	t := srv.targets[sc]
	for attempt := 1; ; attempt++ {
		m := measurement{Round: round, Server: srv.name, Scenario: sc, Attempts: attempt}
		chk := newChecker(sc.Endpoint, b.expected[sc])
		sat := loadSpec{Workers: b.o.connections, Duration: b.o.saturation}
		fixed := loadSpec{Rate: b.o.rate, Workers: b.o.connections, Duration: b.o.latency}

		client := newClient(t, true, b.o.connections)
		warm, err := b.warm(client, t, chk, sat)
		if err != nil {
			return m, err
		}
		m.Warmups = append(m.Warmups, warm)
		if m.Saturation, err = attack(client, t, b.reviews, chk, sat); err != nil {
			return m, err
		}
		client.CloseIdleConnections()

		client = newClient(t, true, 0)
		if warm, err = b.warm(client, t, chk, fixed); err != nil {
			return m, err
		}
		m.Warmups = append(m.Warmups, warm)
		if m.Latency, err = attack(client, t, b.reviews, chk, fixed); err != nil {
			return m, err
		}
		client.CloseIdleConnections()
		if m.PeakRSS, err = peakRSS(t.Pid); err != nil {
			return m, err
		}
		foreign := m.foreignCores()
		if foreign <= b.o.maxForeign || attempt > b.o.retries {
			return m, nil
		}
		b.say("  %s %s: processes outside the benchmark kept %.2f cores busy; measuring again", srv.name, sc, foreign)
	}
}

// warm runs spec for the warm-up time, when there is one.
func (b *bench) warm(client *http.Client, t target, chk *checker, spec loadSpec) (loadResult, error) {
	if b.o.warmup == 0 {
		return loadResult{}, nil
	}
	spec.Duration = b.o.warmup
	return attack(client, t, b.reviews, chk, spec)
}

// churnRun measures validate (active) at the churn rate with a new TLS
// connection for every request.
func (b *bench) churnRun(srv *server) (loadResult, error) {
	sc := scenario{validate, stateActive}
	t := srv.targets[sc]
	client := newClient(t, false, 0)
	defer client.CloseIdleConnections()
	return attack(client, t, b.reviews, newChecker(sc.Endpoint, b.expected[sc]), loadSpec{Rate: b.o.churnRate, Workers: b.o.connections, Duration: b.o.churn})
}

// environment records the machine, versions and reviews.
func (b *bench) environment() environment {
	env := environment{
		Started: time.Now(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(),
		CPU: cpuModel(), Reviews: len(b.reviews), OPAReadOptimizedArg: b.o.readOptimal,
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

// stop stops the OPA servers.
func (b *bench) stop() error {
	var errs []error
	for _, s := range b.opas {
		errs = append(errs, s.Stop())
	}
	return errors.Join(errs...)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// cpuModel names the machine's processor, from /proc/cpuinfo.
func cpuModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(raw)) {
		if key, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "unknown"
}
