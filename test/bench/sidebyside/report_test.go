package sidebyside

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestSpread(t *testing.T) {
	tests := map[string]struct {
		values []float64
		want   spread
		text   string
	}{
		"none":  {values: nil, want: spread{}, text: "–"},
		"one":   {values: []float64{2}, want: spread{med: 2, lo: 2, hi: 2, n: 1}, text: "2.0"},
		"odd":   {values: []float64{3, 1, 2}, want: spread{med: 2, lo: 1, hi: 3, n: 3}, text: "2.0 (1.0–3.0)"},
		"even":  {values: []float64{4, 1, 2, 3}, want: spread{med: 2.5, lo: 1, hi: 4, n: 4}, text: "2.5 (1.0–4.0)"},
		"equal": {values: []float64{5, 5, 5}, want: spread{med: 5, lo: 5, hi: 5, n: 3}, text: "5.0 (5.0–5.0)"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := spreadOf(tc.values)
			if got != tc.want {
				t.Errorf("spreadOf(%v) = %+v, want %+v", tc.values, got, tc.want)
			}
			if text := got.format(formatFixed(1)); text != tc.text {
				t.Errorf("format = %q, want %q", text, tc.text)
			}
		})
	}
}

func TestRatiosAreTakenRoundByRound(t *testing.T) {
	tests := map[string]struct {
		a, b map[int]float64
		want []float64
	}{
		"same rounds":     {a: map[int]float64{1: 10, 2: 30}, b: map[int]float64{1: 5, 2: 10}, want: []float64{2, 3}},
		"a round missing": {a: map[int]float64{1: 10, 2: 30}, b: map[int]float64{2: 10}, want: []float64{3}},
		"zero divisor":    {a: map[int]float64{1: 10}, b: map[int]float64{1: 0}, want: nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ratios(tc.a, tc.b)
			if len(got) != len(tc.want) {
				t.Fatalf("ratios = %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("ratios = %v, want %v", got, tc.want)
				}
			}
		})
	}
}

func TestPercentileIsTheNearestRank(t *testing.T) {
	var r loadResult
	for i := 1; i <= 100; i++ {
		r.Latencies = append(r.Latencies, time.Duration(i)*time.Millisecond)
	}
	tests := map[string]struct {
		q    float64
		want time.Duration
	}{
		"p50":  {q: 0.5, want: 50 * time.Millisecond},
		"p90":  {q: 0.9, want: 90 * time.Millisecond},
		"p99":  {q: 0.99, want: 99 * time.Millisecond},
		"max":  {q: 1, want: 100 * time.Millisecond},
		"zero": {q: 0, want: time.Millisecond},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := r.Percentile(tc.q); got != tc.want {
				t.Errorf("Percentile(%v) = %s, want %s", tc.q, got, tc.want)
			}
		})
	}
	if got := (loadResult{}).Percentile(0.99); got != 0 {
		t.Errorf("no latencies: %s", got)
	}
}

func TestThousands(t *testing.T) {
	tests := map[float64]string{0: "0", 999: "999", 1000: "1,000", 12345.6: "12,346", 1234567: "1,234,567", -2500: "-2,500"}
	for v, want := range tests {
		if got := thousands(v); got != want {
			t.Errorf("thousands(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestReport checks the verdicts against the targets and that a run with a
// wrong answer is reported as invalid.
func TestReport(t *testing.T) {
	o := Options{Out: t.TempDir(), Rounds: 1, Connections: 8, Rate: 1000, Saturation: time.Second, Latency: time.Second}
	run := func(server string, sc scenario, rps float64, p99 time.Duration, rss uint64, wrong int) measurement {
		lat := make([]time.Duration, 100)
		for i := range lat {
			lat[i] = p99 / 2
		}
		lat[99] = p99
		lat[98] = p99
		n := int(rps)
		return measurement{
			Round: 1, Server: server, Scenario: sc, Memory: memory{Peak: rss}, Attempts: 1,
			Saturation: loadResult{Requests: n + wrong, Wrong: wrong, Elapsed: time.Second, Latencies: lat},
			Latency:    loadResult{Requests: 1000, Elapsed: time.Second, Latencies: lat},
		}
	}
	build := func(fgRPS float64, fgP99 time.Duration, fgRSS uint64, wrong int) results {
		var res results
		for _, sc := range scenarios {
			res.Measurements = append(res.Measurements,
				run(fencegateServer, sc, fgRPS, fgP99, fgRSS, wrong),
				run(opaServerName, sc, 2000, 7*time.Millisecond, 80<<20, 0))
		}
		res.Baselines = []measurement{
			run(floorServer, scenario{}, 8000, 700*time.Microsecond, 20<<20, 0),
			run(allowAllServer, scenario{}, 2000, 1400*time.Microsecond, 30<<20, 0),
		}
		return res
	}
	tests := map[string]struct {
		res     results
		want    []string
		notWant []string
		wantErr string
	}{
		"targets met": {res: build(7000, 800*time.Microsecond, 60<<20, 0), want: []string{
			"| requests/s at saturation (8 connections) | 7,000 | 2,000 | 3.50× |",
			"3.50× in the weakest scenario", "| met |", "| peak RSS ≤ 64 MiB | 60.0 MiB (VmHWM)",
			"| requests/s at saturation (8 connections) | 8,000 | 2,000 | 0.25× |",
			"| ≥ 0.8× the floor's requests/s at saturation | 0.88× in the weakest scenario (validate, active; rounds 0.88×); the allow-all webhook 0.25×",
			"| p99 at 1,000 req/s ≤ 1.25× the floor's | 1.14× in the slowest scenario (validate, active; rounds 1.14×); the allow-all webhook 2.00× | met |",
		}},
		"targets missed": {res: build(5000, 2*time.Millisecond, 80<<20, 0), want: []string{
			"2.50× in the weakest scenario", "2.00 ms in the slowest scenario", "| peak RSS ≤ 64 MiB | 80.0 MiB (VmHWM)", "file-backed (the binary's pages) | **missed** |",
			"| ≥ 0.8× the floor's requests/s at saturation | 0.62× in the weakest scenario",
			"| p99 at 1,000 req/s ≤ 1.25× the floor's | 2.86× in the slowest scenario (validate, active; rounds 2.86×); the allow-all webhook 2.00× | **missed** |",
		}},
		"wrong answers": {res: build(7000, 800*time.Microsecond, 60<<20, 3), want: []string{
			"| failed / wrong answers of all requests | 0 / 3 of 8,003 |",
		}, wantErr: "12 were answered wrongly"},
		"the weakest scenarios named": {res: func() results {
			res := build(7000, 800*time.Microsecond, 60<<20, 0)
			for i, m := range res.Measurements {
				switch {
				case m.Server != fencegateServer:
				case m.Scenario == scenario{mutate, stateActive}:
					res.Measurements[i] = run(fencegateServer, m.Scenario, 4000, 800*time.Microsecond, 60<<20, 0)
				case m.Scenario == scenario{validate, stateFenced}:
					res.Measurements[i] = run(fencegateServer, m.Scenario, 7000, 1400*time.Microsecond, 60<<20, 0)
				}
			}
			return res
		}(), want: []string{
			"| ≥ 0.8× the floor's requests/s at saturation | 0.50× in the weakest scenario (mutate, active; rounds 0.50×)",
			"| p99 at 1,000 req/s ≤ 1.25× the floor's | 2.00× in the slowest scenario (validate, fenced; rounds 2.00×)",
		}},
		"a floor without figures": {res: func() results {
			res := build(7000, 800*time.Microsecond, 60<<20, 0)
			res.Baselines[0].Round = 2 // in no round of fencegate's
			return res
		}(), want: []string{
			"| ≥ 0.8× the floor's requests/s at saturation | no run of fencegate and the floor in the same round | **missed** |",
			"| p99 at 1,000 req/s ≤ 1.25× the floor's | no run of fencegate and the floor in the same round | **missed** |",
		}},
		"no baselines": {res: results{Measurements: build(7000, 800*time.Microsecond, 60<<20, 0).Measurements}, want: []string{
			"3.50× in the weakest scenario",
		}, notWant: []string{"## Baselines", "the floor's requests/s"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var out bytes.Buffer
			err := report(o, tc.res, &out, func(string, ...any) {})
			checkErr(t, err, tc.wantErr)
			checkReportSays(t, out.String(), tc.want...)
			for _, w := range tc.notWant {
				if strings.Contains(out.String(), w) {
					t.Errorf("the report says %q:\n%s", w, out.String())
				}
			}
		})
	}
}

// checkReportSays fails t for each of wants that the report does not say.
func checkReportSays(t *testing.T, report string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(report, w) {
			t.Errorf("the report does not say %q:\n%s", w, report)
		}
	}
}
