package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/stack"
)

// generatorMemoryLimit is the heap size at which the load generator
// collects garbage.
const generatorMemoryLimit = 1 << 30

func main() {
	if len(os.Args) > 1 && os.Args[1] == floorCommand {
		os.Exit(floorMain(os.Args[2:]))
	}
	os.Exit(mainCode())
}

// options are the command's flags.
type options struct {
	out         string
	rounds      int
	connections int
	saturation  time.Duration
	rate        int
	latency     time.Duration
	warmup      time.Duration
	churnRate   int
	churn       time.Duration
	reviews     int
	maxForeign  float64
	retries     int
	retryBudget time.Duration
	readOptimal bool
}

func mainCode() int {
	var o options
	flag.StringVar(&o.out, "o", "reports", "directory the report is written to (created if missing)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each measures every scenario on both servers, alternating which goes first")
	flag.IntVar(&o.connections, "connections", 8, "kept-alive connections (and workers) of the saturation runs")
	flag.DurationVar(&o.saturation, "saturation-duration", 3*time.Second, "length of each saturation run")
	flag.IntVar(&o.rate, "rate", 1000, "requests per second of the fixed-rate (latency) runs")
	flag.DurationVar(&o.latency, "latency-duration", 4*time.Second, "length of each fixed-rate run")
	flag.DurationVar(&o.warmup, "warmup", 500*time.Millisecond, "unmeasured (but checked) load before each run, to open connections and warm caches")
	flag.IntVar(&o.churnRate, "churn-rate", 500, "requests per second of the connection-churn runs (a new TLS connection per request)")
	flag.DurationVar(&o.churn, "churn-duration", 2*time.Second, "length of each connection-churn run; 0 skips them")
	flag.IntVar(&o.reviews, "reviews", 64, "distinct AdmissionReview bodies (half CREATE, half UPDATE) sent in turn")
	flag.Float64Var(&o.maxForeign, "max-foreign-cores", 0.3, "measure a run again when processes outside the benchmark kept more than this many cores busy during it")
	flag.IntVar(&o.retries, "retries", 2, "how many times a disturbed run is measured again, at most")
	flag.DurationVar(&o.retryBudget, "retry-budget", 45*time.Second, "how much time measuring disturbed runs again may take in all")
	flag.BoolVar(&o.readOptimal, "opa-read-optimized-store", false, "run OPA with --optimize-store-for-read-speed (which costs it 3–7% more CPU per request with these policies)")
	flag.Parse()
	if err := o.validate(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	// The load generator allocates for every request. Collecting only when
	// the heap reaches a limit (a few times a minute at most, a few MiB
	// live) keeps the collector's pauses out of the latencies it measures
	// and leaves the shared cores to the servers.
	debug.SetGCPercent(-1)
	debug.SetMemoryLimit(generatorMemoryLimit)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	return 0
}

func (o options) validate() error {
	var errs []error
	positive := map[string]int{"-rounds": o.rounds, "-connections": o.connections, "-rate": o.rate, "-reviews": o.reviews}
	for name, v := range positive {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s is %d: want a positive number", name, v))
		}
	}
	if o.saturation <= 0 || o.latency <= 0 {
		errs = append(errs, fmt.Errorf("-saturation-duration %s and -latency-duration %s must be positive", o.saturation, o.latency))
	}
	if o.churn > 0 && o.churnRate <= 0 {
		errs = append(errs, fmt.Errorf("-churn-rate is %d: want a positive rate, or -churn-duration 0 to skip churn", o.churnRate))
	}
	if o.warmup < 0 || o.churn < 0 || o.retries < 0 || o.retryBudget < 0 || o.maxForeign < 0 {
		errs = append(errs, errors.New("-warmup, -churn-duration, -retries, -retry-budget and -max-foreign-cores cannot be negative"))
	}
	if o.reviews < 2 {
		errs = append(errs, fmt.Errorf("-reviews is %d: want at least 2 (a CREATE and an UPDATE)", o.reviews))
	}
	return errors.Join(errs...)
}

// run builds what it needs, starts both servers, measures and reports.
func run(ctx context.Context, o options, out, progress io.Writer) (err error) {
	say := func(format string, args ...any) { fmt.Fprintf(progress, format+"\n", args...) }
	root, err := cluster.ModuleRoot()
	if err != nil {
		return err
	}
	say("building the control plane and opa (cached after the first time) …")
	tools := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-tools.sh"), "kube", "etcd", "opa")
	tools.Stdout, tools.Stderr = progress, progress
	if err := tools.Run(); err != nil {
		return fmt.Errorf("hack/build-tools.sh kube etcd opa: %w", err)
	}
	work, err := os.MkdirTemp("", "fencegate-bench-")
	if err != nil {
		return fmt.Errorf("work directory: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(work)) }()
	say("building fencegate …")
	bin, err := stack.Build(ctx, work)
	if err != nil {
		return err
	}

	say("starting a fence authority and two control planes, east (holds the fence) and west (fenced) …")
	stackDir := filepath.Join(work, "stack")
	if err := os.Mkdir(stackDir, 0o700); err != nil {
		return fmt.Errorf("stack directory: %w", err)
	}
	s, err := stack.Start(ctx, stack.Options{
		Binary:   bin,
		Dir:      stackDir,
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1}, {Name: "west", Epoch: 1}},
		Say:      func(format string, args ...any) { say("  "+format, args...) },
	})
	defer func() {
		if stopErr := s.Stop(); stopErr != nil {
			err = errors.Join(err, fmt.Errorf("stop the stack: %w", stopErr))
		}
	}()
	if err != nil {
		return err
	}

	b, err := newBench(ctx, o, root, s, say)
	defer func() { err = errors.Join(err, b.stop()) }()
	if err != nil {
		return err
	}
	res, err := b.measure(ctx)
	if err != nil {
		return err
	}
	return report(o, res, out, say)
}
