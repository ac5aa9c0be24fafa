package sidebyside

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/fencegate/fencegate/test/bench/benchdata"
	"github.com/fencegate/fencegate/test/cluster"
)

// TestMain serves as the baselines' server when the bench starts this test
// binary as its own (TestRunAtShortSize).
func TestMain(m *testing.M) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	served, code := ServeFloorCommand(ctx, os.Args[1:])
	stop()
	if !served {
		code = m.Run()
	}
	os.Exit(code)
}

// TestRunAtShortSize runs the whole side-by-side bench at a short size:
// the stack, OPA's servers, both baselines, every kind of run and the
// report, every answer checked (Run fails on a wrong one).
func TestRunAtShortSize(t *testing.T) {
	cluster.RequireTools(t, append(cluster.ControlPlaneBinaries, "opa")...)
	dir := t.TempDir()
	o := Options{
		Out: dir, JSON: filepath.Join(dir, "run.json"), Rounds: 1, Connections: 2,
		Saturation: 200 * time.Millisecond, Rate: 200, Latency: 200 * time.Millisecond, Warmup: 50 * time.Millisecond,
		ChurnRate: 50, Churn: 200 * time.Millisecond, Reviews: 4,
		// Figures of a run this short are not worth measuring again.
		MaxForeign: 1000, Rates: []int{100}, CurveDuration: 200 * time.Millisecond, LogFormat: "json",
	}
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	var out, progress bytes.Buffer
	if err := Run(t.Context(), o, &out, &progress); err != nil {
		t.Fatalf("%v\n%s", err, progress.String())
	}
	checkReportSays(t, out.String(),
		"## Baselines: the floor, and a webhook that decides nothing",
		"| ≥ 3× OPA server's requests/s at saturation |",
		"| ≥ 0.8× the floor's requests/s at saturation |",
		"| p99 at 200 req/s ≤ 1.25× the floor's |",
		"| 1 | allow-all webhook | no decision |",
	)
	data, err := os.ReadFile(o.JSON)
	if err != nil {
		t.Fatal(err)
	}
	var sbs benchdata.SideBySide
	if err := json.Unmarshal(data, &sbs); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]map[string]bool{}
	for _, r := range sbs.Runs {
		if kinds[r.Server] == nil {
			kinds[r.Server] = map[string]bool{}
		}
		kinds[r.Server][r.Kind] = true
	}
	for server, want := range map[string][]string{
		fencegateServer: {benchdata.Saturation, benchdata.FixedRate, benchdata.LoadCurve, benchdata.Churn},
		opaServerName:   {benchdata.Saturation, benchdata.FixedRate, benchdata.LoadCurve, benchdata.Churn},
		floorServer:     {benchdata.Saturation, benchdata.FixedRate, benchdata.LoadCurve},
		allowAllServer:  {benchdata.Saturation, benchdata.FixedRate, benchdata.LoadCurve},
	} {
		for _, kind := range want {
			if !kinds[server][kind] {
				t.Errorf("the JSON has no %s run of %s: %v", kind, server, kinds)
			}
		}
	}
}
