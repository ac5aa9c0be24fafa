package curves

import (
	"strings"
	"testing"
)

// reMarkOutput is `go test -bench BenchmarkReMark` output as recorded on a
// two-core machine, logs and all.
const reMarkOutput = `goos: linux
goarch: amd64
pkg: github.com/fencegate/fencegate/controller
cpu: Intel(R) Xeon(R) Processor
BenchmarkReMark/components=1000-2         	       1	15699356389 ns/op	       123.5 bare-objects/s	       132.5 objects/s	         1.073 ratio	         7.547 s/remark
--- BENCH: BenchmarkReMark/components=1000-2
    remark_bench_test.go:51: 1000 Components, 1 rounds, 8 workers: controller 133 objects/s, bare client 124 objects/s, ratio 1.07
    controller.go:330: "level"=0 "msg"="All workers finished" "controller"="component"
BenchmarkReMark/components=3000-2         	       1	50172822504 ns/op	        92.60 bare-objects/s	       170.9 objects/s	         1.845 ratio	        17.55 s/remark
PASS
ok  	github.com/fencegate/fencegate/controller	217.575s
`

// agentsOutput is made-up output in the shape BenchmarkAgents reports
// (a subset of its metrics), with two runs of the 10-agent size.
const agentsOutput = `goos: linux
goarch: amd64
pkg: github.com/fencegate/fencegate/authority
cpu: Intel(R) Xeon(R) Processor
BenchmarkAgents/agents=10-2     1  10031000000 ns/op  1.2 declare-p50-ms  4.0 declare-p99-ms  0.9 txn-floor-p99-ms  0.3 keepalive-floor-p99-ms  3.1 cpu/txn-floor
BenchmarkAgents/agents=10-2     1  10029000000 ns/op  1.1 declare-p50-ms  6.0 declare-p99-ms  1.1 txn-floor-p99-ms  0.4 keepalive-floor-p99-ms  2.9 cpu/txn-floor
BenchmarkAgents/agents=100-2    1  10120000000 ns/op  12 declare-failures  2.0 declare-p50-ms  9.5 declare-p99-ms  2.5 txn-floor-p99-ms  0.6 keepalive-floor-p99-ms  3.3 cpu/txn-floor
PASS
`

func TestParse(t *testing.T) {
	tests := map[string]struct {
		input     string
		wantCPU   string
		wantNames []string
		wantProcs int
		check     map[string]map[string]float64 // name → unit → value of its first result
		wantErr   string
	}{
		"re-mark, with logs between results": {
			input:     reMarkOutput,
			wantCPU:   "Intel(R) Xeon(R) Processor",
			wantNames: []string{"BenchmarkReMark/components=1000", "BenchmarkReMark/components=3000"},
			wantProcs: 2,
			check: map[string]map[string]float64{
				"BenchmarkReMark/components=1000": {"s/remark": 7.547, "bare-objects/s": 123.5, "ratio": 1.073, "ns/op": 15699356389},
				"BenchmarkReMark/components=3000": {"objects/s": 170.9},
			},
		},
		"no GOMAXPROCS suffix": {
			input:     "BenchmarkX/size=5 \t 10 \t 3.5 ns/op\n",
			wantNames: []string{"BenchmarkX/size=5"},
			wantProcs: 1,
			check:     map[string]map[string]float64{"BenchmarkX/size=5": {"ns/op": 3.5}},
		},
		"a name alone, as a benchmark that logs first prints it": {
			input:     "BenchmarkX-2\n    x_test.go:10: log\nBenchmarkX-2   5   12 ns/op\n",
			wantNames: []string{"BenchmarkX"},
			wantProcs: 2,
		},
		"the name of a sub-benchmark with a dash": {
			input:     "BenchmarkY/a-b-4   7   1 ns/op\n",
			wantNames: []string{"BenchmarkY/a-b"},
			wantProcs: 4,
		},
		"nothing but logs": {input: "PASS\nok  \tpkg\t1s\n--- FAIL: TestX\n"},
		"a value that is not a number": {
			input:   "BenchmarkZ-2   1   fast ns/op\n",
			wantErr: `line 1: BenchmarkZ-2: value "fast" of "ns/op" is not a number`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			bs, err := Parse(strings.NewReader(tc.input))
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Parse error = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := bs.CPU(); got != tc.wantCPU {
				t.Errorf("CPU = %q, want %q", got, tc.wantCPU)
			}
			var names []string
			for _, r := range bs.Results {
				names = append(names, r.Name)
				if r.Procs != tc.wantProcs {
					t.Errorf("%s: Procs = %d, want %d", r.Name, r.Procs, tc.wantProcs)
				}
			}
			if strings.Join(names, ",") != strings.Join(tc.wantNames, ",") {
				t.Errorf("names = %v, want %v", names, tc.wantNames)
			}
			for name, units := range tc.check {
				for _, r := range bs.Results {
					if r.Name != name {
						continue
					}
					for unit, want := range units {
						if got := r.Metrics[unit]; got != want {
							t.Errorf("%s %s = %v, want %v", name, unit, got, want)
						}
					}
					break
				}
			}
		})
	}
}

func TestSweep(t *testing.T) {
	bs, err := Parse(strings.NewReader(reMarkOutput + agentsOutput))
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		bench, key, unit string
		want             []Point
	}{
		"one result per size": {
			bench: "BenchmarkReMark", key: "components", unit: "s/remark",
			want: []Point{{X: 1000, Y: 7.547, Lo: 7.547, Hi: 7.547, N: 1}, {X: 3000, Y: 17.55, Lo: 17.55, Hi: 17.55, N: 1}},
		},
		"the median and range of repeated results": {
			bench: "BenchmarkAgents", key: "agents", unit: "declare-p99-ms",
			want: []Point{{X: 10, Y: 5, Lo: 4, Hi: 6, N: 2}, {X: 100, Y: 9.5, Lo: 9.5, Hi: 9.5, N: 1}},
		},
		"a unit no result reports": {bench: "BenchmarkReMark", key: "components", unit: "declare-p99-ms"},
		"another key":              {bench: "BenchmarkReMark", key: "agents", unit: "s/remark"},
		"a benchmark not run":      {bench: "BenchmarkCacheMemory", key: "components", unit: "B/component-whole"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := bs.Sweep(tc.bench, tc.key, tc.unit)
			if len(got) != len(tc.want) {
				t.Fatalf("Sweep = %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("point %d = %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

func TestUnits(t *testing.T) {
	bs, err := Parse(strings.NewReader(agentsOutput))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(bs.Units("BenchmarkAgents"), " ")
	want := "cpu/txn-floor declare-failures declare-p50-ms declare-p99-ms keepalive-floor-p99-ms ns/op txn-floor-p99-ms"
	if got != want {
		t.Errorf("Units = %q, want %q", got, want)
	}
}
