package curves

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/test/bench/benchdata"
)

// cacheOutput is BenchmarkCacheMemory's and BenchmarkRunMemory's output as
// recorded on a two-core machine (the second's 10,000 made up).
const cacheOutput = `goos: linux
goarch: amd64
pkg: github.com/fencegate/fencegate/controller
cpu: Intel(R) Xeon(R) Processor
BenchmarkCacheMemory/components=1000-2         	       1	4013613072 ns/op	      2478 B/component-saved	      2212 B/component-trimmed	      4690 B/component-whole	         0.4716 trimmed/whole
BenchmarkCacheMemory/components=10000-2        	       1	11063503923 ns/op	      2485 B/component-saved	      2170 B/component-trimmed	      4655 B/component-whole	         0.4662 trimmed/whole
pkg: github.com/fencegate/fencegate/test/e2e
BenchmarkRunMemory/components=1000-2         	       1	        43.09 anon-MiB	       901.1 heap-B/component	        33.73 heap-MiB	       122.0 peak-rss-MiB	       103.7 rss-MiB
BenchmarkRunMemory/components=10000-2         	       1	        61.20 anon-MiB	       1204 heap-B/component	        44.40 heap-MiB	       122.0 peak-rss-MiB	       121.9 rss-MiB
`

// sideBySide is a made-up side-by-side run with a latency curve at two
// rates.
func sideBySide() *benchdata.SideBySide {
	s := &benchdata.SideBySide{
		Started:       time.Date(2026, 12, 6, 7, 0, 0, 0, time.UTC),
		Machine:       benchdata.Machine{CPU: "Intel(R) Xeon(R) Processor", Cores: 2, GoVersion: "go1.26.8", Commit: "ad58df8"},
		Rounds:        1,
		CurveScenario: "validate, active",
	}
	for _, r := range []struct {
		server string
		rate   int
		p99    float64
	}{
		{benchdata.Fencegate, 250, 0.9}, {benchdata.Fencegate, 500, 1.1},
		{benchdata.OPAServer, 250, 1.8}, {benchdata.OPAServer, 500, 2.6},
		{benchdata.Floor, 250, 0.4}, {benchdata.Floor, 500, 0.5},
		{benchdata.AllowAll, 250, 0.6}, {benchdata.AllowAll, 500, 0.8},
	} {
		s.Runs = append(s.Runs, benchdata.Run{Round: 1, Server: r.server, Kind: benchdata.LoadCurve, OfferedRate: r.rate, P99Millis: r.p99})
	}
	// A fixed-rate run is not part of the curve.
	s.Runs = append(s.Runs, benchdata.Run{Round: 1, Server: benchdata.Fencegate, Kind: benchdata.FixedRate, OfferedRate: 1000, P99Millis: 50})
	return s
}

func TestFigures(t *testing.T) {
	tests := map[string]struct {
		bench       string
		sideBySide  *benchdata.SideBySide
		wantFigures []string
		wantMissing []string
	}{
		"every plot": {
			bench:       reMarkOutput + agentsOutput + cacheOutput,
			sideBySide:  sideBySide(),
			wantFigures: []string{"admission-latency", "remark", "authority-p99", "cache-memory"},
		},
		"nothing measured": {
			wantMissing: []string{
				"Admission latency against offered load: left out, there are no side-by-side measurements",
				"Re-mark time against Components: left out, BenchmarkReMark reported no s/remark and bare-objects/s",
				"Authority p99 against agents: left out, BenchmarkAgents reported no *-p99-ms",
				"Cache memory against cached Components: left out, BenchmarkCacheMemory reported no",
			},
		},
		"a side-by-side run without a curve": {
			bench:       reMarkOutput,
			sideBySide:  &benchdata.SideBySide{Runs: []benchdata.Run{{Server: benchdata.Fencegate, Kind: benchdata.FixedRate, OfferedRate: 1000, P99Millis: 1}}},
			wantFigures: []string{"remark"},
			wantMissing: []string{"measured no latency curve", "BenchmarkAgents", "BenchmarkCacheMemory"},
		},
		"the authority's benchmark alone": {
			bench:       agentsOutput,
			wantFigures: []string{"authority-p99"},
			wantMissing: []string{"side-by-side", "BenchmarkReMark", "BenchmarkCacheMemory"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			bs, err := Parse(strings.NewReader(tc.bench))
			if err != nil {
				t.Fatal(err)
			}
			figs, missing, err := Figures(Inputs{Bench: bs, BenchSource: "bench.txt", SideBySide: tc.sideBySide, SideBySideSource: "bench.json", Note: "A reduced run."})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, f := range figs {
				names = append(names, f.Name)
				if !strings.HasSuffix(f.Caption, "A reduced run.") {
					t.Errorf("%s: the caption does not end with the note: %q", f.Name, f.Caption)
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.wantFigures, ",") {
				t.Errorf("figures %v, want %v", names, tc.wantFigures)
			}
			if len(missing) != len(tc.wantMissing) {
				t.Fatalf("missing %q, want %d lines", missing, len(tc.wantMissing))
			}
			for i, want := range tc.wantMissing {
				if !strings.Contains(missing[i], want) {
					t.Errorf("missing[%d] = %q, want it to say %q", i, missing[i], want)
				}
			}
		})
	}
}

func TestWriteHTML(t *testing.T) {
	bs, err := Parse(strings.NewReader(reMarkOutput + agentsOutput + cacheOutput))
	if err != nil {
		t.Fatal(err)
	}
	in := Inputs{Bench: bs, BenchSource: "reports/bench.txt", SideBySide: sideBySide(), SideBySideSource: "reports/bench.json"}
	figs, missing, err := Figures(in)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	err = WriteHTML(&buf, Page{
		Generated: time.Date(2026, 12, 6, 7, 30, 0, 0, time.UTC), Commit: "ad58df8",
		Sources: []string{"reports/bench.txt", "reports/bench.json"}, Note: "Sizes <reduced>.", Figures: figs,
		Missing: append(missing, "Something: left out."),
	})
	if err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	tests := map[string]struct {
		want  string
		count int
	}{
		"a page":                        {want: "<!DOCTYPE html>", count: 1},
		"its date":                      {want: "<title>fencegate's cost curves, 2026-12-06 07:30 UTC</title>", count: 1},
		"an inline SVG per plot":        {want: "<svg", count: 4},
		"no XML declaration inside":     {want: "<?xml", count: 0},
		"no external resource":          {want: "src=", count: 0},
		"each plot titled (in the SVG)": {want: ">Re-mark time against Components</text>", count: 1},
		"axes with units":               {want: ">memory added by the Components (MiB)</text>", count: 1},
		"the whole process's memory":    {want: ">fencegate run, the whole process</text>", count: 1},
		"its figures in the caption":    {want: "901 bytes per Component at 1,000, 1204 bytes per Component at 10,000", count: 1},
		"the load axis":                 {want: ">offered load (requests/s)</text>", count: 1},
		"the anchor in the legend":      {want: ">OPA&#39;s server (anchor)</text>", count: 1},
		"the floor in the legend":       {want: ">floor: TLS, no decision</text>", count: 1},
		"the allow-all webhook":         {want: ">controller-runtime webhook allowing all, no decision (anchor)</text>", count: 1},
		"the re-mark floor":             {want: ">bare client: same status applies, same concurrency (floor)</text>", count: 1},
		"the authority's floors":        {want: ">floor: an etcd lease keep-alive</text>", count: 1},
		"a caption per plot":            {want: "<figcaption>", count: 4},
		"the machine":                   {want: "Intel(R) Xeon(R) Processor", count: 4},
		"the ratios in the caption":     {want: "1.07× at 1,000, 1.84× at 3,000", count: 1},
		"the failed declarations":       {want: "failed (timed out) and were retried: 12 at 100 agents.", count: 1},
		"the note, escaped":             {want: "Sizes &lt;reduced&gt;.", count: 1},
		"what was left out":             {want: "<li>Something: left out.</li>", count: 1},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := strings.Count(page, tc.want); got != tc.count {
				t.Errorf("the page holds %q %d times, want %d", tc.want, got, tc.count)
			}
		})
	}
	if t.Failed() {
		t.Logf("page:\n%s", page)
	}

	dir := t.TempDir()
	paths, err := WriteSVGs(dir, figs)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 4 {
		t.Fatalf("WriteSVGs wrote %v, want 4 files", paths)
	}
	data, err := os.ReadFile(filepath.Join(dir, "remark.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(data, []byte("<svg")) || !bytes.Contains(data, []byte(`xmlns="http://www.w3.org/2000/svg"`)) {
		t.Errorf("remark.svg is not a standalone SVG: %.200s", data)
	}
}
