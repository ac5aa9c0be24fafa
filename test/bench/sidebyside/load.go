package sidebyside

import (
	"crypto/tls"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"slices"
	"sync/atomic"
	"time"

	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// target is one server endpoint under load.
type target struct {
	// URL is the endpoint's https URL.
	URL string
	// TLS trusts the server's CA.
	TLS *tls.Config
	// Pid is the server process, whose CPU time is measured.
	Pid int
	// Pprof is where the server serves Go's profiles, if it does.
	Pprof string
}

// loadSpec describes one run of the load generator.
type loadSpec struct {
	// Rate is the fixed request rate per second; 0 means as fast as the
	// workers go (closed loop), for saturation.
	Rate int
	// Workers is the number of workers of a saturation run; a fixed-rate
	// run starts with Workers and adds more when all are busy, as an
	// open-loop generator must (the client bounds the connections).
	Workers int
	// Duration is how long requests are sent.
	Duration time.Duration
}

// loadResult is what one run measured.
type loadResult struct {
	// Rate is the offered rate per second; 0 for a closed loop.
	Rate int
	// Requests is the number of answers received.
	Requests int
	// Failed counts transport errors and non-200 answers; Wrong counts
	// 200 answers that are not the expected AdmissionReview.
	Failed, Wrong int
	// FirstProblem describes the first failed or wrong answer.
	FirstProblem string
	// Elapsed is from the first request sent to the last answer received.
	Elapsed time.Duration
	// Latencies of every answer, sorted.
	Latencies []time.Duration
	// ServerCPU is the CPU time the server process used during the run,
	// GeneratorCPU that of this process (the load generator), StackCPU
	// that of the other processes this one started (the idle servers, the
	// control planes, the authority), ForeignCPU that of everything else on
	// the machine: other people's work.
	ServerCPU, GeneratorCPU, StackCPU, ForeignCPU time.Duration
}

// Throughput is the rate of correct answers.
func (r loadResult) Throughput() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Failed-r.Wrong) / r.Elapsed.Seconds()
}

// Percentile returns the latency below which q (0..1) of the answers fall
// (nearest rank).
func (r loadResult) Percentile(q float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(r.Latencies)))) - 1
	return r.Latencies[min(max(rank, 0), len(r.Latencies)-1)]
}

// ServerCPUPerRequest is the server's CPU time per answer.
func (r loadResult) ServerCPUPerRequest() time.Duration {
	if r.Requests == 0 {
		return 0
	}
	return r.ServerCPU / time.Duration(r.Requests)
}

// ForeignCores is how many cores processes that are not the benchmark's
// kept busy on average during the run.
func (r loadResult) ForeignCores() float64 { return r.cores(r.ForeignCPU) }

// StackCores is how many cores the idle parts of the stack kept busy on
// average during the run.
func (r loadResult) StackCores() float64 { return r.cores(r.StackCPU) }

func (r loadResult) cores(cpu time.Duration) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return cpu.Seconds() / r.Elapsed.Seconds()
}

// newClient returns an HTTP/1.1 client for one target; with keepAlive its
// connections are reused, up to maxConns of them (0: unbounded).
func newClient(t target, keepAlive bool, maxConns int) *http.Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSClientConfig:     t.TLS.Clone(),
		TLSHandshakeTimeout: 5 * time.Second,
		DisableKeepAlives:   !keepAlive,
		MaxIdleConnsPerHost: max(maxConns, 1024),
		MaxConnsPerHost:     maxConns,
		IdleConnTimeout:     time.Minute,
		// HTTP/1.1 with a known number of connections, as the API
		// server's webhook client keeps them, rather than multiplexed
		// HTTP/2 streams.
		ForceAttemptHTTP2: false,
		TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// roundRobin sends the reviews' bodies in turn.
func roundRobin(url string, reviews []review) vegeta.Targeter {
	header := http.Header{"Content-Type": {"application/json"}}
	var next atomic.Uint64
	return func(t *vegeta.Target) error {
		i := next.Add(1) - 1
		t.Method, t.URL, t.Body, t.Header = http.MethodPost, url, reviews[i%uint64(len(reviews))].Body, header
		return nil
	}
}

// attack runs spec against the target with client, checks every answer,
// and measures latencies and CPU time.
func attack(client *http.Client, t target, reviews []review, chk answerCheck, spec loadSpec) (loadResult, error) {
	opts := []func(*vegeta.Attacker){
		vegeta.Client(client),
		vegeta.Workers(uint64(max(spec.Workers, 1))),
		vegeta.MaxBody(1 << 20),
	}
	pacer := vegeta.Pacer(vegeta.ConstantPacer{Freq: spec.Rate, Per: time.Second})
	if spec.Rate == 0 {
		opts = append(opts, vegeta.MaxWorkers(uint64(spec.Workers)))
		pacer = vegeta.ConstantPacer{} // as fast as the workers go
	}
	before, err := sampleCPU(t.Pid)
	if err != nil {
		return loadResult{}, err
	}
	res := loadResult{Rate: spec.Rate}
	if spec.Rate > 0 {
		res.Latencies = make([]time.Duration, 0, int(float64(spec.Rate)*spec.Duration.Seconds())+16)
	}
	var first, last time.Time
	attacker := vegeta.NewAttacker(opts...)
	for r := range attacker.Attack(roundRobin(t.URL, reviews), pacer, spec.Duration, "") {
		res.Requests++
		res.Latencies = append(res.Latencies, r.Latency)
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if end := r.End(); end.After(last) {
			last = end
		}
		switch {
		case r.Error != "" && r.Code == 0:
			res.Failed++
			res.note(fmt.Errorf("request %d: %s", r.Seq, r.Error))
		default:
			if err := chk.check(int(r.Code), r.Body); err != nil {
				if r.Code != http.StatusOK {
					res.Failed++
				} else {
					res.Wrong++
				}
				res.note(fmt.Errorf("request %d: %w", r.Seq, err))
			}
		}
	}
	after, err := sampleCPU(t.Pid)
	if err != nil {
		return loadResult{}, err
	}
	res.ServerCPU, res.GeneratorCPU = after.server-before.server, after.self-before.self
	res.StackCPU = max(after.family-before.family-res.ServerCPU, 0)
	res.ForeignCPU = max(after.machine-before.machine-res.GeneratorCPU-(after.family-before.family), 0)
	res.Elapsed = last.Sub(first)
	slices.Sort(res.Latencies)
	return res, nil
}

func (r *loadResult) note(err error) {
	if r.FirstProblem == "" {
		r.FirstProblem = err.Error()
	}
}

// cpuSample is a reading of the CPU time of the server, of this process, of
// the processes it started and of the whole machine.
type cpuSample struct {
	server, self, family, machine time.Duration
}

func sampleCPU(server int) (cpuSample, error) {
	var s cpuSample
	var err error
	if s.server, err = cpuTime(server); err != nil {
		return s, err
	}
	if s.self, err = cpuTime(0); err != nil {
		return s, err
	}
	if s.family, err = descendantsCPU(os.Getpid()); err != nil {
		return s, err
	}
	if s.machine, err = machineBusy(); err != nil {
		return s, err
	}
	return s, nil
}
