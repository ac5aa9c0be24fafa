package sidebyside

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/cli"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/stack"
)

// Options configure a run; AddFlags gives each its flag.
type Options struct {
	// Out is the directory the report is written to.
	Out string
	// Rounds is how many times every scenario is measured on both servers.
	Rounds int
	// Connections is the number of kept-alive connections (and workers)
	// of the saturation runs.
	Connections int
	// Saturation is the length of each saturation run.
	Saturation time.Duration
	// Rate and Latency are the request rate and length of each fixed-rate
	// run.
	Rate    int
	Latency time.Duration
	// Warmup is the unmeasured (but checked) load before each run.
	Warmup time.Duration
	// ChurnRate and Churn are the rate and length of each connection-churn
	// run; Churn 0 skips them.
	ChurnRate int
	Churn     time.Duration
	// Reviews is the number of distinct AdmissionReview bodies sent in turn.
	Reviews int
	// MaxForeign, Retries and RetryBudget bound the measuring again of runs
	// that processes outside the benchmark disturbed.
	MaxForeign  float64
	Retries     int
	RetryBudget time.Duration
	// ReadOptimal runs OPA with --optimize-store-for-read-speed.
	ReadOptimal bool
	// Rates are the offered rates (requests/s) of the latency curve:
	// validate (active) on fencegate and OPA, and the baselines (the floor
	// and the allow-all webhook), each round, for CurveDuration each. None
	// skips the curve.
	Rates         []int
	CurveDuration time.Duration
	// JSON is the file the measurements are written to as JSON
	// (benchdata.SideBySide); empty writes them beside the report.
	JSON string
	// CPUProfile, when set, is the file that gets a Go CPU profile of the
	// active cluster's `fencegate run` during the first round's validate
	// (active) saturation run.
	CPUProfile string
	// LogFormat is `fencegate run`'s --log-format: json, the chart's
	// default, or console.
	LogFormat string
}

// AddFlags registers the options' flags on fs, with their defaults.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Out, "o", "reports", "directory the report is written to (created if missing)")
	fs.IntVar(&o.Rounds, "rounds", 3, "rounds; each measures every scenario on both servers, alternating which goes first")
	fs.IntVar(&o.Connections, "connections", 8, "kept-alive connections (and workers) of the saturation runs")
	fs.DurationVar(&o.Saturation, "saturation-duration", 3*time.Second, "length of each saturation run")
	fs.IntVar(&o.Rate, "rate", 1000, "requests per second of the fixed-rate (latency) runs")
	fs.DurationVar(&o.Latency, "latency-duration", 4*time.Second, "length of each fixed-rate run")
	fs.DurationVar(&o.Warmup, "warmup", 500*time.Millisecond,
		"unmeasured (but checked) load before each run, to open connections and warm caches")
	fs.IntVar(&o.ChurnRate, "churn-rate", 500,
		"requests per second of the connection-churn runs (a new TLS connection per request)")
	fs.DurationVar(&o.Churn, "churn-duration", 2*time.Second, "length of each connection-churn run; 0 skips them")
	fs.IntVar(&o.Reviews, "reviews", 64, "distinct AdmissionReview bodies (half CREATE, half UPDATE) sent in turn")
	fs.Float64Var(&o.MaxForeign, "max-foreign-cores", 0.3,
		"measure a run again when processes outside the benchmark kept more than this many cores busy during it")
	fs.IntVar(&o.Retries, "retries", 2, "how many times a disturbed run is measured again, at most")
	fs.DurationVar(&o.RetryBudget, "retry-budget", 45*time.Second, "how much time measuring disturbed runs again may take in all")
	fs.BoolVar(&o.ReadOptimal, "opa-read-optimized-store", false,
		"run OPA with --optimize-store-for-read-speed (which costs it 3–7% more CPU per request with these policies)")
	fs.Func("rates", "comma-separated offered rates (requests/s) of the latency curve, e.g. 250,500,1000,2000: "+
		"validate (active) on every server at each rate, each round (default none)", func(v string) error {
		rates, err := parseRates(v)
		o.Rates = rates
		return err
	})
	fs.DurationVar(&o.CurveDuration, "rates-duration", 2*time.Second, "length of each run of the latency curve (-rates)")
	fs.StringVar(&o.JSON, "json", "", "file the measurements are written to as JSON (default: beside the report, bench-<date>-<time>.json)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "file to write a CPU profile of fencegate to, taken during the first validate (active) saturation run (go tool pprof FILE)")
	fs.StringVar(&o.LogFormat, "log-format", "json", "fencegate run's --log-format: json, the chart's default, which writes "+cli.JSONLogSampling+", or console, which writes every line")
}

// parseRates parses a comma-separated list of positive rates.
func parseRates(v string) ([]int, error) {
	var rates []int
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		r, err := strconv.Atoi(f)
		if err != nil || r <= 0 {
			return nil, fmt.Errorf("rate %q: want a positive number of requests per second", f)
		}
		rates = append(rates, r)
	}
	return rates, nil
}

// Validate reports every option that is out of range.
func (o Options) Validate() error {
	var errs []error
	positive := map[string]int{"-rounds": o.Rounds, "-connections": o.Connections, "-rate": o.Rate, "-reviews": o.Reviews}
	for name, v := range positive {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("%s is %d: want a positive number", name, v))
		}
	}
	if o.Saturation <= 0 || o.Latency <= 0 {
		errs = append(errs, fmt.Errorf("-saturation-duration %s and -latency-duration %s must be positive", o.Saturation, o.Latency))
	}
	if o.Churn > 0 && o.ChurnRate <= 0 {
		errs = append(errs, fmt.Errorf("-churn-rate is %d: want a positive rate, or -churn-duration 0 to skip churn", o.ChurnRate))
	}
	if o.Warmup < 0 || o.Churn < 0 || o.Retries < 0 || o.RetryBudget < 0 || o.MaxForeign < 0 {
		errs = append(errs, errors.New("-warmup, -churn-duration, -retries, -retry-budget and -max-foreign-cores cannot be negative"))
	}
	if len(o.Rates) > 0 && o.CurveDuration <= 0 {
		errs = append(errs, fmt.Errorf("-rates-duration %s must be positive", o.CurveDuration))
	}
	if o.Reviews < 2 {
		errs = append(errs, fmt.Errorf("-reviews is %d: want at least 2 (a CREATE and an UPDATE)", o.Reviews))
	}
	if o.LogFormat != "json" && o.LogFormat != "console" {
		errs = append(errs, fmt.Errorf("-log-format %q: want json or console", o.LogFormat))
	}
	return errors.Join(errs...)
}

// Run builds what it needs, starts both servers, measures and reports: the
// report on out, progress on progress.
func Run(ctx context.Context, o Options, out, progress io.Writer) (err error) {
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
		Binary:    bin,
		Dir:       stackDir,
		Clusters:  []stack.ClusterSpec{{Name: "east", Epoch: 1}, {Name: "west", Epoch: 1}},
		Profiling: o.CPUProfile != "",
		LogFormat: o.LogFormat,
		Say:       func(format string, args ...any) { say("  "+format, args...) },
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
