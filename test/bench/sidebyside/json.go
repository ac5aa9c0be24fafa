package sidebyside

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencegate/fencegate/test/bench/benchdata"
)

// sideBySide is res as the run's JSON file holds it: every measured run,
// summarized.
func sideBySide(res results) benchdata.SideBySide {
	env := res.Env
	out := benchdata.SideBySide{
		Started: env.Started, Finished: env.Finished,
		Machine: benchdata.Machine{
			CPU: env.CPU, Cores: env.Cores, GoVersion: env.GoVersion, OPAVersion: env.OPAVersion,
			Commit: env.Commit, LoadBefore: env.LoadBefore, LoadAfter: env.LoadAfter,
		},
		FencegateLogFormat: env.LogFormat,
		Runs:               []benchdata.Run{},
	}
	rounds := map[int]bool{}
	for _, m := range append(append([]measurement{}, res.Measurements...), res.Baselines...) {
		rounds[m.Round] = true
		sat := jsonRun(m.Round, m.Server, m.Scenario.String(), benchdata.Saturation, 0, m.Saturation)
		fixed := jsonRun(m.Round, m.Server, m.Scenario.String(), benchdata.FixedRate, m.Latency.Rate, m.Latency)
		sat.PeakRSSBytes, fixed.PeakRSSBytes = m.Memory.Peak, m.Memory.Peak
		out.Runs = append(out.Runs, sat, fixed)
	}
	for _, c := range res.Churn {
		out.Runs = append(out.Runs, jsonRun(c.Round, c.Server, curveScenario.String(), benchdata.Churn, c.Result.Rate, c.Result))
	}
	if len(res.Curve) > 0 {
		out.CurveScenario = curveScenario.String()
	}
	for _, c := range res.Curve {
		sc := curveScenario
		if isBaseline(c.Server) {
			sc = scenario{}
		}
		out.Runs = append(out.Runs, jsonRun(c.Round, c.Server, sc.String(), benchdata.LoadCurve, c.Rate, c.Result))
	}
	out.Rounds = len(rounds)
	return out
}

func jsonRun(round int, server, sc, kind string, rate int, r loadResult) benchdata.Run {
	return benchdata.Run{
		Round: round, Server: server, Scenario: sc, Kind: kind, OfferedRate: rate,
		Throughput: r.Throughput(),
		P50Millis:  ms(r.Percentile(0.5)), P90Millis: ms(r.Percentile(0.9)), P99Millis: ms(r.Percentile(0.99)),
		ServerCPUMicros: micros(r.ServerCPUPerRequest()), ForeignCores: r.ForeignCores(),
		Requests: r.Requests, Failed: r.Failed, Wrong: r.Wrong,
	}
}

// writeJSON writes v, indented, to path.
func writeJSON(path string, v benchdata.SideBySide) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the measurements: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("directory of %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("write the measurements: %w", err)
	}
	return nil
}
