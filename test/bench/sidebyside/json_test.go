package sidebyside

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencegate/fencegate/test/bench/benchdata"
)

// curveResults are one round of the latency curve at two rates, with one
// measurement of fencegate and one of each baseline.
func curveResults() results {
	at := func(rate int, p99 time.Duration, answered int) loadResult {
		lat := make([]time.Duration, 100)
		for i := range lat {
			lat[i] = p99 / 2
		}
		lat[98], lat[99] = p99, p99
		return loadResult{Rate: rate, Requests: answered, Elapsed: time.Second, Latencies: lat}
	}
	res := results{Env: environment{
		Started: time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC), CPU: "Intel(R) Xeon(R) Processor", Cores: 2, GoVersion: "go1.26.8", Commit: "ad58df8", LogFormat: "json",
	}}
	res.Measurements = []measurement{{
		Round: 1, Server: fencegateServer, Scenario: scenario{validate, stateActive}, Memory: memory{Peak: 60 << 20},
		Saturation: at(0, 3*time.Millisecond, 5000), Latency: at(1000, time.Millisecond, 1000),
	}}
	res.Baselines = []measurement{
		{Round: 1, Server: floorServer, Saturation: at(0, time.Millisecond, 9000), Latency: at(1000, 400*time.Microsecond, 1000)},
		{Round: 1, Server: allowAllServer, Saturation: at(0, 2*time.Millisecond, 3000), Latency: at(1000, 600*time.Microsecond, 1000)},
	}
	for _, c := range []struct {
		server string
		rate   int
		p99    time.Duration
		kept   int
	}{
		{fencegateServer, 250, 800 * time.Microsecond, 250}, {opaServerName, 250, 2 * time.Millisecond, 250}, {floorServer, 250, 300 * time.Microsecond, 250},
		{allowAllServer, 250, 500 * time.Microsecond, 250},
		{fencegateServer, 2000, 4 * time.Millisecond, 1900}, {opaServerName, 2000, 90 * time.Millisecond, 1200}, {floorServer, 2000, time.Millisecond, 2000},
		{allowAllServer, 2000, 3 * time.Millisecond, 2000},
	} {
		res.Curve = append(res.Curve, curveRun{Round: 1, Server: c.server, Rate: c.rate, Result: at(c.rate, c.p99, c.kept), Warmup: loadResult{Requests: 10}})
	}
	return res
}

func TestSideBySideJSON(t *testing.T) {
	got := sideBySide(curveResults())
	if got.Machine.CPU != "Intel(R) Xeon(R) Processor" || got.Rounds != 1 || got.CurveScenario != "validate, active" || got.FencegateLogFormat != "json" {
		t.Errorf("header = %+v, rounds %d, curve scenario %q, fencegate's log format %q", got.Machine, got.Rounds, got.CurveScenario, got.FencegateLogFormat)
	}
	tests := map[string]struct {
		server, kind string
		rate         int
		want         benchdata.Run
	}{
		"fencegate's saturation run": {server: fencegateServer, kind: benchdata.Saturation, want: benchdata.Run{
			Round: 1, Server: "fencegate", Scenario: "validate, active", Kind: "saturation", Throughput: 5000,
			P50Millis: 1.5, P90Millis: 1.5, P99Millis: 3, PeakRSSBytes: 60 << 20, Requests: 5000,
		}},
		"the floor's fixed-rate run": {server: floorServer, kind: benchdata.FixedRate, rate: 1000, want: benchdata.Run{
			Round: 1, Server: "floor", Scenario: "no decision", Kind: "fixed-rate", OfferedRate: 1000, Throughput: 1000,
			P50Millis: 0.2, P90Millis: 0.2, P99Millis: 0.4, Requests: 1000,
		}},
		"OPA's server on the curve, falling behind": {server: opaServerName, kind: benchdata.LoadCurve, rate: 2000, want: benchdata.Run{
			Round: 1, Server: "OPA server", Scenario: "validate, active", Kind: "load-curve", OfferedRate: 2000, Throughput: 1200,
			P50Millis: 45, P90Millis: 45, P99Millis: 90, Requests: 1200,
		}},
		"the floor on the curve": {server: floorServer, kind: benchdata.LoadCurve, rate: 250, want: benchdata.Run{
			Round: 1, Server: "floor", Scenario: "no decision", Kind: "load-curve", OfferedRate: 250, Throughput: 250,
			P50Millis: 0.15, P90Millis: 0.15, P99Millis: 0.3, Requests: 250,
		}},
		"the allow-all webhook's saturation run": {server: allowAllServer, kind: benchdata.Saturation, want: benchdata.Run{
			Round: 1, Server: "allow-all webhook", Scenario: "no decision", Kind: "saturation", Throughput: 3000,
			P50Millis: 1, P90Millis: 1, P99Millis: 2, Requests: 3000,
		}},
		"the allow-all webhook on the curve": {server: allowAllServer, kind: benchdata.LoadCurve, rate: 2000, want: benchdata.Run{
			Round: 1, Server: "allow-all webhook", Scenario: "no decision", Kind: "load-curve", OfferedRate: 2000, Throughput: 2000,
			P50Millis: 1.5, P90Millis: 1.5, P99Millis: 3, Requests: 2000,
		}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var found []benchdata.Run
			for _, r := range got.Runs {
				if r.Server == tc.server && r.Kind == tc.kind && r.OfferedRate == tc.rate {
					found = append(found, r)
				}
			}
			if len(found) != 1 {
				t.Fatalf("%d runs of %s %s at %d, want 1: %+v", len(found), tc.server, tc.kind, tc.rate, got.Runs)
			}
			if found[0] != tc.want {
				t.Errorf("run = %+v\nwant  %+v", found[0], tc.want)
			}
		})
	}
}

// TestReportWritesJSON checks that the report writes the measurements as
// JSON beside the Markdown (or where -json says) and gives the curve's
// table when there is a curve.
func TestReportWritesJSON(t *testing.T) {
	tests := map[string]struct {
		json     string
		wantPath string
	}{
		"beside the report": {wantPath: "bench-20261206-070000.json"},
		"where -json says":  {json: "elsewhere/run.json", wantPath: "elsewhere/run.json"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			o := Options{Out: dir, Rounds: 1, Connections: 8, Rate: 1000, Rates: []int{250, 2000}, CurveDuration: 2 * time.Second}
			if tc.json != "" {
				o.JSON = filepath.Join(dir, tc.json)
			}
			var out bytes.Buffer
			if err := report(o, curveResults(), &out, func(string, ...any) {}); err != nil {
				t.Fatal(err)
			}
			data, err := os.ReadFile(filepath.Join(dir, tc.wantPath))
			if err != nil {
				t.Fatal(err)
			}
			var back benchdata.SideBySide
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if len(back.Runs) != len(sideBySide(curveResults()).Runs) {
				t.Errorf("the file holds %d runs, want %d", len(back.Runs), len(sideBySide(curveResults()).Runs))
			}
			checkReportSays(t, out.String(),
				"## Latency against offered load: validate, active, 2s per rate",
				"| 250 | 0.400 | 0.800 | 100% | 1.00 | 2.00 | 100% | 0.150 | 0.300 | 100% | 0.250 | 0.500 | 100% |",
				"| 2,000 | 2.00 | 4.00 | 95% | 45.00 | 90.00 | 60% | 0.500 | 1.00 | 100% | 1.50 | 3.00 | 100% |",
				"| failed / wrong answers | 0 / 0 of 2,170 | | | 0 / 0 of 1,470 | | | 0 / 0 of 2,270 | | | 0 / 0 of 2,270 | | |",
			)
		})
	}
}
