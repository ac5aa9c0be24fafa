package benchdata

import "time"

// The servers of the side-by-side run, as SideBySide names them.
const (
	Fencegate = "fencegate"
	OPAServer = "OPA server"
	// Floor is a Go HTTPS server that answers a canned AdmissionReview
	// without decoding anything: TLS, the machine and the load generator
	// alone.
	Floor = "floor"
	// AllowAll is the same server answering through controller-runtime's
	// admission webhook, allowing every request: what decoding a request
	// the usual Go way costs, with no decision. An anchor.
	AllowAll = "allow-all webhook"
)

// The kinds of runs of the side-by-side benchmark.
const (
	// Saturation is a closed loop over kept-alive connections.
	Saturation = "saturation"
	// FixedRate is an open loop at the report's fixed rate.
	FixedRate = "fixed-rate"
	// LoadCurve is an open loop at one of the rates of the latency
	// curve (-rates), over the same kept-alive connections.
	LoadCurve = "load-curve"
	// Churn is an open loop with a new TLS connection per request.
	Churn = "churn"
)

// SideBySide is what one side-by-side run measured: every run of every
// round, as the run's JSON file holds it beside its Markdown report.
type SideBySide struct {
	// Started and Finished bound the measurements.
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Machine is where it ran.
	Machine Machine `json:"machine"`
	// Rounds is how many rounds were measured.
	Rounds int `json:"rounds"`
	// CurveScenario is the scenario the LoadCurve runs measure
	// ("validate, active"); the baselines' runs (the floor's and the
	// allow-all webhook's) have no scenario.
	CurveScenario string `json:"curveScenario,omitempty"`
	// FencegateLogFormat is fencegate's --log-format: "json" (the chart's
	// default, which samples repeated lines) or "console" (every line);
	// empty in runs from before it was recorded, which used console.
	FencegateLogFormat string `json:"fencegateLogFormat,omitempty"`
	// Runs are every measured run (warm-ups are checked, not listed).
	Runs []Run `json:"runs"`
}

// Machine describes where and how the figures were measured.
type Machine struct {
	CPU        string `json:"cpu"`
	Cores      int    `json:"cores"`
	GoVersion  string `json:"goVersion"`
	OPAVersion string `json:"opaVersion,omitempty"`
	Commit     string `json:"commit,omitempty"`
	// LoadBefore and LoadAfter are the 1-minute load averages.
	LoadBefore float64 `json:"loadBefore"`
	LoadAfter  float64 `json:"loadAfter"`
}

// Run is one measured run of one server.
type Run struct {
	Round  int    `json:"round"`
	Server string `json:"server"`
	// Scenario is "validate, active" and the like; "no decision" for the
	// baselines (Floor, AllowAll).
	Scenario string `json:"scenario"`
	Kind     string `json:"kind"`
	// OfferedRate is the requests per second sent (0 at saturation).
	OfferedRate int `json:"offeredRate,omitempty"`
	// Throughput is the correct answers per second.
	Throughput float64 `json:"throughput"`
	// P50Millis, P90Millis and P99Millis are latency percentiles in
	// milliseconds.
	P50Millis float64 `json:"p50Millis"`
	P90Millis float64 `json:"p90Millis"`
	P99Millis float64 `json:"p99Millis"`
	// ServerCPUMicros is the server process's CPU time per answer, in µs.
	ServerCPUMicros float64 `json:"serverCPUMicros"`
	// PeakRSSBytes is the server's VmHWM after the round's runs of this
	// scenario (0 when not read).
	PeakRSSBytes uint64 `json:"peakRSSBytes,omitempty"`
	// ForeignCores is how many cores processes outside the benchmark
	// kept busy during the run.
	ForeignCores float64 `json:"foreignCores"`
	// Requests, Failed and Wrong count the run's answers.
	Requests int `json:"requests"`
	Failed   int `json:"failed"`
	Wrong    int `json:"wrong"`
}
