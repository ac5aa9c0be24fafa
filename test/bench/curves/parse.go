package curves

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Result is one line of `go test -bench` output.
type Result struct {
	// Pkg is the package the benchmark is in (the "pkg:" line before it).
	Pkg string
	// Name is the benchmark's full name without its GOMAXPROCS suffix:
	// BenchmarkReMark/components=1000.
	Name string
	// Procs is GOMAXPROCS (the name's -N suffix; 1 when there is none).
	Procs int
	// Iterations is b.N.
	Iterations int
	// Metrics are the values by unit: "ns/op", "objects/s", ….
	Metrics map[string]float64
}

// Benchmarks are the results of one or more `go test -bench` runs.
type Benchmarks struct {
	// Config are the first "key: value" lines seen (goos, goarch, cpu).
	Config  map[string]string
	Results []Result
}

// Parse reads the standard benchmark format: "key: value" configuration
// lines and result lines ("BenchmarkX/sub-2  3  123 ns/op  4.5 unit").
// Everything else (the benchmarks' logs, PASS, ok) is skipped.
func Parse(r io.Reader) (Benchmarks, error) {
	bs := Benchmarks{Config: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	pkg := ""
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if key, value, ok := configLine(text); ok {
			if key == "pkg" {
				pkg = value
			} else if _, seen := bs.Config[key]; !seen {
				bs.Config[key] = value
			}
			continue
		}
		res, ok, err := resultLine(text)
		if err != nil {
			return bs, fmt.Errorf("line %d: %w", line, err)
		}
		if ok {
			res.Pkg = pkg
			bs.Results = append(bs.Results, res)
		}
	}
	if err := sc.Err(); err != nil {
		return bs, fmt.Errorf("read the benchmark output: %w", err)
	}
	return bs, nil
}

// configLine parses "key: value", where key is lower case, as the
// benchmark format's configuration lines are.
func configLine(text string) (key, value string, ok bool) {
	key, value, ok = strings.Cut(text, ": ")
	if !ok || key == "" || strings.ContainsFunc(key, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' && r != '_'
	}) {
		return "", "", false
	}
	return key, strings.TrimSpace(value), true
}

// resultLine parses a result line; a line that only starts like one (a
// benchmark's name alone, or its name and a log) is not one.
func resultLine(text string) (Result, bool, error) {
	fields := strings.Fields(text)
	if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") || len(fields)%2 != 0 {
		return Result{}, false, nil
	}
	n, err := strconv.Atoi(fields[1])
	if err != nil {
		return Result{}, false, nil
	}
	res := Result{Name: fields[0], Procs: 1, Iterations: n, Metrics: map[string]float64{}}
	if i := strings.LastIndexByte(res.Name, '-'); i > 0 {
		if procs, err := strconv.Atoi(res.Name[i+1:]); err == nil && procs > 0 {
			res.Name, res.Procs = res.Name[:i], procs
		}
	}
	for i := 2; i < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			return Result{}, false, fmt.Errorf("%s: value %q of %q is not a number", fields[0], fields[i], fields[i+1])
		}
		res.Metrics[fields[i+1]] = v
	}
	return res, true, nil
}

// Point is the median of one metric over the results of one
// sub-benchmark size.
type Point struct {
	// X is the size: the N of key=N in the sub-benchmark's name.
	X float64
	// Y is the median value; Lo and Hi the lowest and highest.
	Y, Lo, Hi float64
	// N is how many results the point summarizes.
	N int
}

// Sweep returns, for every sub-benchmark of bench named key=N (in any
// part of its name), the median of unit over its results, by N. Results
// without the unit are skipped.
func (bs Benchmarks) Sweep(bench, key, unit string) []Point {
	return bs.sweep(bench, key, func(r Result) (float64, bool) {
		v, ok := r.Metrics[unit]
		return v, ok
	})
}

func (bs Benchmarks) sweep(bench, key string, value func(Result) (float64, bool)) []Point {
	bySize := map[float64][]float64{}
	for _, r := range bs.Results {
		size, ok := sizeOf(r.Name, bench, key)
		if !ok {
			continue
		}
		if v, ok := value(r); ok {
			bySize[size] = append(bySize[size], v)
		}
	}
	var points []Point
	for _, size := range slices.Sorted(maps.Keys(bySize)) {
		points = append(points, summarize(size, bySize[size]))
	}
	return points
}

// Units returns the units that the results of bench report, sorted.
func (bs Benchmarks) Units(bench string) []string {
	seen := map[string]bool{}
	for _, r := range bs.Results {
		if top, _, _ := strings.Cut(r.Name, "/"); top == bench {
			for u := range r.Metrics {
				seen[u] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

// CPU is the machine the benchmarks ran on, as their "cpu:" line says.
func (bs Benchmarks) CPU() string { return bs.Config["cpu"] }

// sizeOf returns N when name is a sub-benchmark of bench with a part key=N.
func sizeOf(name, bench, key string) (float64, bool) {
	parts := strings.Split(name, "/")
	if parts[0] != bench {
		return 0, false
	}
	for _, p := range parts[1:] {
		if v, ok := strings.CutPrefix(p, key+"="); ok {
			n, err := strconv.ParseFloat(v, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// summarize is the median and range of vs at x.
func summarize(x float64, vs []float64) Point {
	s := slices.Sorted(slices.Values(vs))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Point{X: x, Y: med, Lo: s[0], Hi: s[len(s)-1], N: len(s)}
}
