package curves

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"gonum.org/v1/plot"

	"github.com/fencegate/fencegate/test/bench/benchdata"
)

// Inputs are what the plots are drawn from. Either may be missing: the
// plots that need it are left out.
type Inputs struct {
	// Bench is the `go test -bench` output; BenchSource names where it
	// was read from.
	Bench       Benchmarks
	BenchSource string
	// SideBySide is the side-by-side admission run's measurements (nil
	// when there are none); SideBySideSource names their file.
	SideBySide       *benchdata.SideBySide
	SideBySideSource string
	// Note is said in every caption: that a run was reduced, for example.
	Note string
}

// Figure is one plot and what it shows.
type Figure struct {
	// Name is the plot's file stem: admission-latency, remark, ….
	Name string
	// Title and Caption say what was measured, how and where.
	Title, Caption string
	Plot           *plot.Plot
}

// The goals the curves are drawn against.
const (
	// goalReMarkRatio is the share of the bare client's rate that
	// re-marking must reach.
	goalReMarkRatio = 0.8
	// goalDeclareP99Millis is a declaration's p99 with 1,000 agents.
	goalDeclareP99Millis = 10
	// goalCacheBytes is the most a cached Component may add to memory.
	goalCacheBytes = 4 << 10
)

// figureMaker draws one figure, or says why it cannot.
type figureMaker func(Inputs) (Figure, string, error)

// makers are the figures in the order the page shows them.
var makers = []figureMaker{admissionLatency, reMarkTime, authorityP99, cacheMemory}

// Figures draws every figure it has the data for, and says which it left
// out and why.
func Figures(in Inputs) (figs []Figure, missing []string, err error) {
	for _, draw := range makers {
		f, why, err := draw(in)
		if err != nil {
			return nil, nil, err
		}
		if why != "" {
			missing = append(missing, why)
			continue
		}
		if in.Note != "" {
			f.Caption += " " + in.Note
		}
		figs = append(figs, f)
	}
	return figs, missing, nil
}

// admissionLatency is the side-by-side run's p99 against offered load.
func admissionLatency(in Inputs) (Figure, string, error) {
	const title = "Admission latency against offered load"
	sbs := in.SideBySide
	if sbs == nil {
		return Figure{}, title + ": left out, there are no side-by-side measurements (" +
			orNone(in.SideBySideSource) + ").", nil
	}
	var ss []series
	rounds := 0
	for _, s := range []struct {
		server, name string
		role         role
	}{
		{benchdata.Fencegate, "fencegate (fencegate run, as deployed)", measured},
		{benchdata.OPAServer, "OPA's server (anchor)", anchor},
		{benchdata.AllowAll, "controller-runtime webhook allowing all, no decision (anchor)", anchor},
		{benchdata.Floor, "floor: TLS, no decision", floor},
	} {
		byRate := map[float64][]float64{}
		for _, r := range sbs.Runs {
			if r.Kind == benchdata.LoadCurve && r.Server == s.server && r.OfferedRate > 0 {
				byRate[float64(r.OfferedRate)] = append(byRate[float64(r.OfferedRate)], r.P99Millis)
			}
		}
		var pts []Point
		for _, rate := range slices.Sorted(maps.Keys(byRate)) {
			pt := summarize(rate, byRate[rate])
			rounds = max(rounds, pt.N)
			pts = append(pts, pt)
		}
		if len(pts) > 0 {
			ss = append(ss, series{name: s.name, role: s.role, points: pts})
		}
	}
	if len(ss) < 2 || len(ss[0].points) < 2 {
		return Figure{}, title + ": left out, the side-by-side run (" + in.SideBySideSource +
			") measured no latency curve of fencegate and its anchors (run it with -rates, e.g. -rates 250,500,1000,2000).", nil
	}
	p, err := newPlot(axes{title: title, x: "offered load (requests/s)", y: "p99 latency (ms)", logY: true}, ss)
	if err != nil {
		return Figure{}, "", err
	}
	m := sbs.Machine
	var foreign []float64
	var problems []string
	for _, r := range sbs.Runs {
		if r.Kind != benchdata.LoadCurve {
			continue
		}
		foreign = append(foreign, r.ForeignCores)
		if r.Failed+r.Wrong > 0 {
			problems = append(problems, fmt.Sprintf("%s at %s req/s (round %d): %d failed and %d wrong of %s",
				r.Server, thousands(float64(r.OfferedRate)), r.Round, r.Failed, r.Wrong, thousands(float64(r.Requests))))
		}
	}
	disturbed := ""
	if f := summarize(0, foreign); f.Hi > 0 {
		disturbed = fmt.Sprintf(" Processes outside the benchmark kept %.2f cores busy during these runs (median; %.2f–%.2f).", f.Y, f.Lo, f.Hi)
	}
	if len(problems) > 0 {
		disturbed += " Not valid, answers failed: " + strings.Join(problems, "; ") + "."
	}
	perRound := "One round."
	if rounds > 1 {
		perRound = fmt.Sprintf("Each point is the median over %d rounds, the bars the lowest and highest.", rounds)
	}
	caption := fmt.Sprintf("p99 latency of AdmissionReviews of Components (%s) over TLS (HTTP/1.1, kept-alive connections), "+
		"sent at each offered rate by the same open-loop load generator to fencegate, to OPA's server with the same "+
		"policies and data, to a Go HTTPS server that answers without deciding (the floor), and to the same server answering "+
		"through controller-runtime's admission webhook with a handler that allows all (decoding each review, deciding nothing); "+
		"every answer checked. "+
		"%s "+
		"Measured %s on %s (%d cores), load average %.2f before and %.2f after, shared with the servers; %s, commit %s (%s).%s",
		orNone(sbs.CurveScenario), perRound, sbs.Started.UTC().Format("2006-01-02 15:04 MST"), orNone(m.CPU), m.Cores,
		m.LoadBefore, m.LoadAfter, orNone(m.GoVersion), orNone(m.Commit), in.SideBySideSource, disturbed)
	return Figure{Name: "admission-latency", Title: title, Caption: caption, Plot: p}, "", nil
}

// reMarkTime is BenchmarkReMark's time to re-mark n Components, the
// controller beside the bare client.
func reMarkTime(in Inputs) (Figure, string, error) {
	const title = "Re-mark time against Components"
	ctrl := in.Bench.Sweep(benchdata.ReMark, benchdata.ComponentsKey, benchdata.ReMarkSeconds)
	bare := in.Bench.sweep(benchdata.ReMark, benchdata.ComponentsKey, func(r Result) (float64, bool) {
		n, _ := sizeOf(r.Name, benchdata.ReMark, benchdata.ComponentsKey)
		rate, ok := r.Metrics[benchdata.ReMarkBareRate]
		return n / rate, ok && rate > 0
	})
	if len(ctrl) == 0 || len(bare) == 0 {
		return Figure{}, missingBench(title, benchdata.ReMark, benchdata.ReMarkSeconds+" and "+benchdata.ReMarkBareRate, in), nil
	}
	var goalPts []Point
	for _, b := range bare {
		g := b.Y / goalReMarkRatio
		goalPts = append(goalPts, Point{X: b.X, Y: g, Lo: g, Hi: g, N: b.N})
	}
	p, err := newPlot(axes{title: title, x: "Components re-marked", y: "time to re-mark all (s)"}, []series{
		{name: "fencegate's controller, after a transition", role: measured, points: ctrl},
		{name: "bare client: same status applies, same concurrency (floor)", role: floor, points: bare},
		{name: fmt.Sprintf("goal: the bare client's time / %.1f", goalReMarkRatio), role: goal, points: goalPts},
	})
	if err != nil {
		return Figure{}, "", err
	}
	ratios := in.Bench.Sweep(benchdata.ReMark, benchdata.ComponentsKey, benchdata.ReMarkRatio)
	var rs []string
	for _, r := range ratios {
		rs = append(rs, fmt.Sprintf("%.2f× at %s", r.Y, thousands(r.X)))
	}
	caption := fmt.Sprintf("%s: on a real API server, the time from a fence transition's signal until the controller "+
		"has re-marked every Component's status, and the time a bare client takes to make the same status server-side "+
		"applies to as many Components of its own, with as many requests at once as the controller has workers, on the same "+
		"API server in the same run (neither with a client-side limit). The controller's rate as a share of the bare "+
		"client's: %s. %s %s",
		benchdata.ReMark, orNone(strings.Join(rs, ", ")), iterations(ctrl), machine(in))
	return Figure{Name: "remark", Title: title, Caption: caption, Plot: p}, "", nil
}

// authorityP99 is BenchmarkAgents' latency percentiles against the number
// of agents: every "<what>-p99-ms" metric it reports is a series.
func authorityP99(in Inputs) (Figure, string, error) {
	const title = "Authority p99 against agents"
	var ss []series
	for _, unit := range in.Bench.Units(benchdata.Agents) {
		what, ok := benchdata.P99Of(unit)
		if !ok {
			continue
		}
		pts := in.Bench.Sweep(benchdata.Agents, benchdata.AgentsKey, unit)
		if len(pts) == 0 {
			continue
		}
		s := series{name: what + " p99", role: anchor, points: pts}
		switch {
		case unit == benchdata.AgentsDeclareP99:
			s.name, s.role = "fencegate's authority: a heartbeat's declaration", measured
		case unit == benchdata.AgentsTxnFloorP99:
			s.name, s.role = "floor: an etcd transaction of the same shape", floor
		case unit == benchdata.AgentsKeepaliveFloorP99:
			s.name, s.role = "floor: an etcd lease keep-alive", floor
		case strings.Contains(what, "floor"):
			s.role = floor
		}
		ss = append(ss, s)
	}
	if len(ss) == 0 {
		return Figure{}, missingBench(title, benchdata.Agents, "*"+benchdata.P99MillisSuffix, in), nil
	}
	// What fencegate's authority answers first, its anchors after.
	slices.SortStableFunc(ss, func(a, b series) int { return int(a.role) - int(b.role) })
	var xs []Point
	for _, s := range ss {
		for _, pt := range s.points {
			xs = append(xs, Point{X: pt.X, Y: goalDeclareP99Millis, Lo: goalDeclareP99Millis, Hi: goalDeclareP99Millis})
		}
	}
	slices.SortFunc(xs, func(a, b Point) int { return int(a.X - b.X) })
	xs = slices.CompactFunc(xs, func(a, b Point) bool { return a.X == b.X })
	ss = append(ss, series{name: fmt.Sprintf("goal: declaration p99 ≤ %d ms", goalDeclareP99Millis), role: goal, points: xs})
	p, err := newPlot(axes{title: title, x: "agents heartbeating", y: "p99 latency (ms)", logY: true}, ss)
	if err != nil {
		return Figure{}, "", err
	}
	var cpu []string
	for _, r := range []struct{ unit, name string }{
		{benchdata.AgentsCPUTxnFloor, "the transaction floor's"},
		{benchdata.AgentsCPUKeepaliveFloor, "the keep-alive floor's"},
	} {
		var at []string
		for _, pt := range in.Bench.Sweep(benchdata.Agents, benchdata.AgentsKey, r.unit) {
			at = append(at, fmt.Sprintf("%.2f× at %s", pt.Y, thousands(pt.X)))
		}
		if len(at) > 0 {
			cpu = append(cpu, r.name+" "+strings.Join(at, ", "))
		}
	}
	cpuText := ""
	if len(cpu) > 0 {
		cpuText = " The authority's and etcd's CPU per heartbeat over " + strings.Join(cpu, "; over ") + "."
	}
	var failed []string
	for _, pt := range in.Bench.Sweep(benchdata.Agents, benchdata.AgentsKey, benchdata.AgentsDeclareFailures) {
		if pt.Hi > 0 {
			failed = append(failed, fmt.Sprintf("%s at %s", thousands(pt.Hi), thousands(pt.X)))
		}
	}
	if len(failed) > 0 {
		cpuText += " Declarations that failed (timed out) and were retried: " + strings.Join(failed, ", ") + " agents."
	}
	caption := fmt.Sprintf("%s: n agents (10 clusters per domain) declaring once a second against one authority process "+
		"over an etcd process of its own, then the floors on the same etcd and the same schedule from a bare etcd client; "+
		"the p99 of every operation it reports (metrics named <operation>%s).%s %s %s",
		benchdata.Agents, benchdata.P99MillisSuffix, cpuText, iterations(ss[0].points), machine(in))
	return Figure{Name: "authority-p99", Title: title, Caption: caption, Plot: p}, "", nil
}

// cacheMemory is BenchmarkCacheMemory's memory per cached Component, times
// the Components cached: whole and trimmed.
func cacheMemory(in Inputs) (Figure, string, error) {
	const title = "Cache memory against cached Components"
	total := func(unit string) []Point {
		return in.Bench.sweep(benchdata.CacheMemory, benchdata.ComponentsKey, func(r Result) (float64, bool) {
			n, _ := sizeOf(r.Name, benchdata.CacheMemory, benchdata.ComponentsKey)
			v, ok := r.Metrics[unit]
			return n * v / (1 << 20), ok
		})
	}
	whole, trimmed := total(benchdata.CacheBytesWhole), total(benchdata.CacheBytesTrimmed)
	if len(whole) == 0 || len(trimmed) == 0 {
		return Figure{}, missingBench(title, benchdata.CacheMemory, benchdata.CacheBytesWhole+" and "+benchdata.CacheBytesTrimmed, in), nil
	}
	var goalPts []Point
	for _, w := range whole {
		g := w.X * goalCacheBytes / (1 << 20)
		goalPts = append(goalPts, Point{X: w.X, Y: g, Lo: g, Hi: g})
	}
	run := in.Bench.sweep(benchdata.RunMemory, benchdata.ComponentsKey, func(r Result) (float64, bool) {
		n, _ := sizeOf(r.Name, benchdata.RunMemory, benchdata.ComponentsKey)
		v, ok := r.Metrics[benchdata.RunHeapPerComponent]
		return n * v / (1 << 20), ok
	})
	plotted := []series{
		{name: "fencegate's cache: trimmed Components", role: measured, points: trimmed},
		{name: "whole Components (a default controller-runtime cache)", role: anchor, points: whole},
		{name: fmt.Sprintf("goal: %d KiB per Component", goalCacheBytes>>10), role: goal, points: goalPts},
	}
	runText := fmt.Sprintf(" %s reported no %s.", benchdata.RunMemory, benchdata.RunHeapPerComponent)
	if len(run) > 0 {
		plotted = append(plotted, series{name: "fencegate run, the whole process", role: measured, points: run})
		var at []string
		for _, pt := range in.Bench.Sweep(benchdata.RunMemory, benchdata.ComponentsKey, benchdata.RunHeapPerComponent) {
			at = append(at, fmt.Sprintf("%.0f bytes per Component at %s", pt.Y, thousands(pt.X)))
		}
		runText = fmt.Sprintf(" %s: the heap in use a real fencegate run process grew by (after a collection) once it had "+
			"marked n Components made through its webhooks, over the same process with none: %s.", benchdata.RunMemory, strings.Join(at, ", "))
	}
	p, err := newPlot(axes{title: title, x: "Components cached", y: "memory added by the Components (MiB)"}, plotted)
	if err != nil {
		return Figure{}, "", err
	}
	var saved []string
	for _, r := range in.Bench.Sweep(benchdata.CacheMemory, benchdata.ComponentsKey, benchdata.CacheTrimmedRatio) {
		saved = append(saved, fmt.Sprintf("%.2f at %s", r.Y, thousands(r.X)))
	}
	caption := fmt.Sprintf("%s: on a real API server, a cache of n realistic Components (applied by kubectl, with an "+
		"actuator's and fencegate's status applies), synced once whole and once trimmed as fencegate's cache trims them, "+
		"in the same run. The figure is the growth of the live heap (after a collection) over the same cache synced over "+
		"no Component, which is the floor and 0 here by construction; a process's RSS follows the live heap at a distance "+
		"set by GOGC. Trimmed / whole: %s.%s %s",
		benchdata.CacheMemory, orNone(strings.Join(saved, ", ")), runText, machine(in))
	return Figure{Name: "cache-memory", Title: title, Caption: caption, Plot: p}, "", nil
}

// missingBench says why a plot of bench's metrics is left out.
func missingBench(title, bench, units string, in Inputs) string {
	return fmt.Sprintf("%s: left out, %s reported no %s in %s.", title, bench, units, orNone(in.BenchSource))
}

// machine says where the Go benchmarks ran.
func machine(in Inputs) string {
	procs := 0
	for _, r := range in.Bench.Results {
		procs = max(procs, r.Procs)
	}
	return fmt.Sprintf("Measured on %s (%s/%s, GOMAXPROCS %d); %s.", orNone(in.Bench.CPU()),
		orNone(in.Bench.Config["goos"]), orNone(in.Bench.Config["goarch"]), procs, orNone(in.BenchSource))
}

// iterations says how many results the points summarize.
func iterations(pts []Point) string {
	n := 0
	for _, pt := range pts {
		n = max(n, pt.N)
	}
	if n <= 1 {
		return "One run per size."
	}
	return fmt.Sprintf("Median over up to %d runs per size, the bars the lowest and highest.", n)
}

func orNone(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
