package sidebyside

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/internal/cli"
)

// The targets fencegate's webhook is held to.
const (
	targetThroughputRatio = 3.0
	targetP99             = time.Millisecond
	targetRSS             = 64 << 20
	// targetFloorThroughput and targetFloorP99 hold it to the floor: at
	// least this share of the floor's requests/s at saturation, and at
	// most this multiple of the floor's p99 at the fixed rate.
	targetFloorThroughput = 0.8
	targetFloorP99        = 1.25
)

// metric is one row of a scenario's table.
type metric struct {
	name   string
	value  func(measurement) float64
	format func(float64) string
}

func metrics(o Options) []metric {
	rate := thousands(float64(o.Rate))
	return []metric{
		{fmt.Sprintf("requests/s at saturation (%d connections)", o.Connections), throughput, formatRate},
		{fmt.Sprintf("p50 at %s req/s (ms)", rate), latencyAt(0.50), formatMS},
		{fmt.Sprintf("p90 at %s req/s (ms)", rate), latencyAt(0.90), formatMS},
		{fmt.Sprintf("p99 at %s req/s (ms)", rate), latencyP99, formatMS},
		{"server CPU per request at saturation (µs)", serverCPU, formatFixed(0)},
		{"peak RSS (MiB)", func(m measurement) float64 { return mib(m.Memory.Peak) }, formatFixed(1)},
		{"resident after the runs: anonymous (MiB)", func(m measurement) float64 { return mib(m.Memory.Anon) }, formatFixed(1)},
		{"resident after the runs: file-backed (MiB)", func(m measurement) float64 { return mib(m.Memory.File) }, formatFixed(1)},
	}
}

// throughput is a measurement's requests/s at saturation.
func throughput(m measurement) float64 { return m.Saturation.Throughput() }

// serverCPU is the server's CPU time per request at saturation, in µs.
func serverCPU(m measurement) float64 { return micros(m.Saturation.ServerCPUPerRequest()) }

// baseline returns the value of the baseline named name, by round.
func baseline(res results, name string, value func(measurement) float64) map[int]float64 {
	return byRound(res.Baselines, name, scenario{}, value)
}

// latencyAt returns a measurement's latency percentile q at the fixed rate,
// in milliseconds.
func latencyAt(q float64) func(measurement) float64 {
	return func(m measurement) float64 { return ms(m.Latency.Percentile(q)) }
}

// latencyP99 is a measurement's p99 at the fixed rate, in milliseconds.
var latencyP99 = latencyAt(0.99)

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// spread is the median and range of a value over rounds.
type spread struct {
	med, lo, hi float64
	n           int
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{}
	}
	s := slices.Sorted(slices.Values(xs))
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return spread{med: med, lo: s[0], hi: s[len(s)-1], n: len(s)}
}

func (s spread) format(f func(float64) string) string {
	if s.n == 0 {
		return "–"
	}
	if s.n == 1 {
		return f(s.med)
	}
	return fmt.Sprintf("%s (%s–%s)", f(s.med), f(s.lo), f(s.hi))
}

// byRound returns value for each round of a server's scenario.
func byRound(ms []measurement, server string, sc scenario, value func(measurement) float64) map[int]float64 {
	out := map[int]float64{}
	for _, m := range ms {
		if m.Server == server && m.Scenario == sc {
			out[m.Round] = value(m)
		}
	}
	return out
}

// values returns a round map's values in round order.
func values(byRound map[int]float64) []float64 {
	rounds := slices.Sorted(mapKeys(byRound))
	out := make([]float64, 0, len(rounds))
	for _, r := range rounds {
		out = append(out, byRound[r])
	}
	return out
}

// ratios divides a by b round by round, over the rounds both have.
func ratios(a, b map[int]float64) []float64 {
	var out []float64
	for _, r := range slices.Sorted(mapKeys(a)) {
		if d, ok := b[r]; ok && d != 0 {
			out = append(out, a[r]/d)
		}
	}
	return out
}

func mapKeys(m map[int]float64) func(func(int) bool) {
	return func(yield func(int) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// report prints the tables, writes them to a file under o.Out, and fails if
// any answer was failed or wrong: such figures are not valid.
func report(o Options, res results, out io.Writer, say func(string, ...any)) error {
	text := render(o, res)
	if _, err := io.WriteString(out, text); err != nil {
		return fmt.Errorf("print the report: %w", err)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return fmt.Errorf("report directory: %w", err)
	}
	stem := filepath.Join(o.Out, "bench-"+res.Env.Started.Format("20060102-150405"))
	if err := os.WriteFile(stem+".md", []byte(text), 0o644); err != nil {
		return fmt.Errorf("write the report: %w", err)
	}
	say("report written to %s.md", stem)
	jsonPath := o.JSON
	if jsonPath == "" {
		jsonPath = stem + ".json"
	}
	if err := writeJSON(jsonPath, sideBySide(res)); err != nil {
		return err
	}
	say("measurements written to %s", jsonPath)
	failed, wrong, requests := totals(res)
	if failed+wrong > 0 {
		return fmt.Errorf("%d of %d requests failed and %d were answered wrongly: the figures are not valid (see the report)",
			failed, requests, wrong)
	}
	return nil
}

// totals counts the failed and wrong answers of every run.
func totals(res results) (failed, wrong, requests int) {
	for _, m := range append(slices.Clone(res.Measurements), res.Baselines...) {
		f, w, n, _ := m.problems()
		failed, wrong, requests = failed+f, wrong+w, requests+n
	}
	for _, c := range res.Churn {
		failed, wrong, requests = failed+c.Result.Failed, wrong+c.Result.Wrong, requests+c.Result.Requests
	}
	for _, c := range res.Curve {
		f, w, n := c.problems()
		failed, wrong, requests = failed+f, wrong+w, requests+n
	}
	return failed, wrong, requests
}

// render formats the report as Markdown.
func render(o Options, res results) string {
	var b strings.Builder
	env := res.Env
	fmt.Fprintf(&b, "# fencegate's admission webhook and OPA's server, side by side\n\n")
	fmt.Fprintf(&b, "%s (measured in %s) · commit %s · %s × %d cores · %s · OPA %s\n\n",
		env.Started.Format(time.RFC3339), env.Finished.Sub(env.Started).Round(time.Second), orUnknown(env.Commit),
		env.CPU, env.Cores, env.GoVersion, orUnknown(env.OPAVersion))
	var foreign, stack []float64
	for _, m := range res.Measurements {
		foreign, stack = append(foreign, m.foreignCores()), append(stack, m.stackCores())
	}
	fmt.Fprintf(&b, "Load average (1 min) %.2f before, %.2f after. "+
		"During the runs, processes outside the benchmark kept %s cores busy, "+
		"the idle parts of the stack (the other servers, control planes, authority) %s (median, min–max); "+
		"runs with more than %.2f foreign cores were measured again, up to %d times and %s in all.\n\n",
		env.LoadBefore, env.LoadAfter, spreadOf(foreign).format(formatFixed(2)), spreadOf(stack).format(formatFixed(2)),
		o.MaxForeign, o.Retries, o.RetryBudget)
	fmt.Fprintf(&b, "Every server (fencegate, OPA's, and the baselines below) serves TLS (ECDSA P-256 certificates, TLS 1.3) and is sent the same %d AdmissionReviews "+
		"of Components in turn, half CREATE (%.1f KB) and half UPDATE with the old object (%.1f KB), "+
		"by the same load generator (vegeta's library, HTTP/1.1, in this process on the same cores). ",
		env.Reviews, float64(env.CreateBytes)/1000, float64(env.UpdateBytes)/1000)
	readOpt := ""
	if env.OPAReadOptimizedArg {
		readOpt = ", --optimize-store-for-read-speed"
	}
	fmt.Fprintf(&b, "fencegate is `fencegate run` as deployed (agent, controller, decision log on, `--log-format %s`%s); "+
		"OPA is `opa run --server --log-level error --skip-version-check%s` (no decision logs) "+
		"with the shipped policies and the tutorial's `system.main` envelope. ", env.LogFormat, logSampling(env.LogFormat), readOpt)
	b.WriteString("Every answer of every run, warm-ups included, is checked against the reference evaluation " +
		"of the shipped policies (OPA in the benchmark's process, `enginetest.Reference`).\n\n")
	fmt.Fprintf(&b, "%d rounds, the servers alternating (fencegate first in odd rounds). "+
		"Saturation: %d kept-alive connections, %s per run; latency: %s req/s for %s; %s warm-up before each. "+
		"Cells: median (min–max) over rounds; the ratio is fencegate / OPA, round by round "+
		"(higher is better for requests/s, lower for the rest).\n\n",
		o.Rounds, o.Connections, o.Saturation, thousands(float64(o.Rate)), o.Latency, o.Warmup)

	for _, sc := range scenarios {
		fmt.Fprintf(&b, "## %s\n\n", scenarioTitle(sc))
		fmt.Fprintf(&b, "| | fencegate | OPA server | fencegate / OPA |\n|---|---:|---:|---:|\n")
		for _, mt := range metrics(o) {
			fg := byRound(res.Measurements, fencegateServer, sc, mt.value)
			opa := byRound(res.Measurements, opaServerName, sc, mt.value)
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mt.name,
				spreadOf(values(fg)).format(mt.format), spreadOf(values(opa)).format(mt.format),
				spreadOf(ratios(fg, opa)).format(formatRatio))
		}
		fmt.Fprintf(&b, "| failed / wrong answers of all requests | %s | %s | |\n\n",
			problemCell(res.Measurements, fencegateServer, sc), problemCell(res.Measurements, opaServerName, sc))
	}

	if len(res.Baselines) > 0 {
		fmt.Fprintf(&b, "## Baselines: the floor, and a webhook that decides nothing\n\n")
		b.WriteString("The **floor** is a Go HTTPS server (configured like fencegate's webhook, a process of its own) that reads each review " +
			"and answers a canned AdmissionReview without decoding anything, measured the same way: " +
			"TLS, this machine and the load generator alone. No admission server can do better here; " +
			"what a server adds above this is its own cost. " +
			"The **allow-all webhook** is the same server answering through controller-runtime's admission webhook, " +
			"which most Go admission webhooks are built on, with a handler that allows every request: " +
			"what decoding each review and encoding its answer the usual Go way cost, before any decision.\n\n")
		fmt.Fprintf(&b, "| | floor | allow-all webhook | allow-all / floor |\n|---|---:|---:|---:|\n")
		for _, mt := range metrics(o)[:5] {
			floor, allowed := baseline(res, floorServer, mt.value), baseline(res, allowAllServer, mt.value)
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mt.name, spreadOf(values(floor)).format(mt.format),
				spreadOf(values(allowed)).format(mt.format), spreadOf(ratios(allowed, floor)).format(formatRatio))
		}
		fmt.Fprintf(&b, "| failed / wrong answers of all requests | %s | %s | |\n\n",
			problemCell(res.Baselines, floorServer, scenario{}), problemCell(res.Baselines, allowAllServer, scenario{}))
	}

	if len(res.Churn) > 0 {
		fmt.Fprintf(&b, "## Connection churn: validate, active, a new TLS connection per request at %s req/s for %s\n\n",
			thousands(float64(o.ChurnRate)), o.Churn)
		fmt.Fprintf(&b, "| | fencegate | OPA server | fencegate / OPA |\n|---|---:|---:|---:|\n")
		for _, row := range []struct {
			name   string
			value  func(loadResult) float64
			format func(float64) string
		}{
			{"requests/s answered", loadResult.Throughput, formatRate},
			{"p50 (ms)", func(r loadResult) float64 { return ms(r.Percentile(0.5)) }, formatMS},
			{"p90 (ms)", func(r loadResult) float64 { return ms(r.Percentile(0.9)) }, formatMS},
			{"p99 (ms)", func(r loadResult) float64 { return ms(r.Percentile(0.99)) }, formatMS},
			{"server CPU per request (µs)", func(r loadResult) float64 { return micros(r.ServerCPUPerRequest()) }, formatFixed(0)},
		} {
			fg, opa := map[int]float64{}, map[int]float64{}
			for _, c := range res.Churn {
				if c.Server == fencegateServer {
					fg[c.Round] = row.value(c.Result)
				} else {
					opa[c.Round] = row.value(c.Result)
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", row.name, spreadOf(values(fg)).format(row.format),
				spreadOf(values(opa)).format(row.format), spreadOf(ratios(fg, opa)).format(formatRatio))
		}
		fcell, ocell := churnProblems(res.Churn, fencegateServer), churnProblems(res.Churn, opaServerName)
		fmt.Fprintf(&b, "| failed / wrong answers of all requests | %s | %s | |\n\n", fcell, ocell)
	}

	renderCurve(&b, o, res)
	renderTargets(&b, o, res)
	renderRuns(&b, o, res)
	return b.String()
}

// renderCurve gives the latency curve's p50 and p99 at each offered rate,
// when the run measured one.
func renderCurve(b *strings.Builder, o Options, res results) {
	if len(res.Curve) == 0 {
		return
	}
	fmt.Fprintf(b, "## Latency against offered load: %s, %s per rate\n\n", curveScenario, o.CurveDuration)
	b.WriteString("The same open loop over the same kept-alive connections at each rate, after a warm-up, in every round; " +
		"the floor and the allow-all webhook answer without deciding. Cells: median (min–max) over rounds; " +
		"\"kept\" is the answers per second as a share of the offered rate.\n\n")
	servers := []string{fencegateServer, opaServerName, floorServer, allowAllServer}
	b.WriteString("| offered req/s |")
	for _, s := range servers {
		fmt.Fprintf(b, " %s p50 ms | %s p99 ms | %s kept |", s, s, s)
	}
	b.WriteString("\n|---:|" + strings.Repeat("---:|---:|---:|", len(servers)) + "\n")
	for _, rate := range o.Rates {
		fmt.Fprintf(b, "| %s |", thousands(float64(rate)))
		for _, s := range servers {
			var p50, p99, kept []float64
			for _, c := range res.Curve {
				if c.Server == s && c.Rate == rate {
					p50 = append(p50, ms(c.Result.Percentile(0.5)))
					p99 = append(p99, ms(c.Result.Percentile(0.99)))
					kept = append(kept, 100*c.Result.Throughput()/float64(rate))
				}
			}
			fmt.Fprintf(b, " %s | %s | %s |", spreadOf(p50).format(formatMS), spreadOf(p99).format(formatMS),
				spreadOf(kept).format(func(v float64) string { return fmt.Sprintf("%.0f%%", v) }))
		}
		b.WriteString("\n")
	}
	fcell := func(server string) string {
		var failed, wrong, requests int
		for _, c := range res.Curve {
			if c.Server == server {
				f, w, n := c.problems()
				failed, wrong, requests = failed+f, wrong+w, requests+n
			}
		}
		return fmt.Sprintf("%d / %d of %s", failed, wrong, thousands(float64(requests)))
	}
	b.WriteString("| failed / wrong answers |")
	for _, s := range servers {
		fmt.Fprintf(b, " %s | | |", fcell(s))
	}
	b.WriteString("\n\n")
}

// renderTargets says whether fencegate meets its targets.
func renderTargets(b *strings.Builder, o Options, res results) {
	fmt.Fprintf(b, "## Targets (fencegate over TLS)\n\n| target | measured | |\n|---|---|---|\n")
	worstRatio, worstRatioAt, lowestRound := 0.0, "", 0.0
	worstP99, worstP99At, highestRound := 0.0, "", 0.0
	var peak float64
	for i, sc := range scenarios {
		r := spreadOf(ratios(byRound(res.Measurements, fencegateServer, sc, throughput),
			byRound(res.Measurements, opaServerName, sc, throughput)))
		if i == 0 || r.med < worstRatio {
			worstRatio, worstRatioAt = r.med, sc.String()
		}
		if i == 0 || r.lo < lowestRound {
			lowestRound = r.lo
		}
		p := spreadOf(values(byRound(res.Measurements, fencegateServer, sc, latencyP99)))
		if p.med > worstP99 {
			worstP99, worstP99At = p.med, sc.String()
		}
		highestRound = max(highestRound, p.hi)
		for _, v := range byRound(res.Measurements, fencegateServer, sc, func(m measurement) float64 { return float64(m.Memory.Peak) }) {
			peak = max(peak, v)
		}
	}
	fmt.Fprintf(b, "| ≥ %.0f× OPA server's requests/s at saturation | %s in the weakest scenario (%s); lowest single round %s | %s |\n",
		targetThroughputRatio, formatRatio(worstRatio), worstRatioAt, formatRatio(lowestRound),
		verdict(worstRatio >= targetThroughputRatio))
	var quiet []float64
	for _, m := range res.Measurements {
		if m.Server == fencegateServer && m.foreignCores() <= o.MaxForeign {
			quiet = append(quiet, latencyP99(m))
		}
	}
	quietText := "no fencegate run was undisturbed by other processes"
	if len(quiet) > 0 {
		q := spreadOf(quiet)
		quietText = fmt.Sprintf("%d fencegate runs undisturbed by other processes: median %s ms, highest %s ms",
			q.n, formatMS(q.med), formatMS(q.hi))
	}
	floorP99 := spreadOf(values(baseline(res, floorServer, latencyP99)))
	fmt.Fprintf(b, "| p99 ≤ %s at the fixed rate | %s ms in the slowest scenario (%s); highest single round %s ms; %s; "+
		"the floor's p99 %s ms | %s |\n",
		targetP99, formatMS(worstP99), worstP99At, formatMS(highestRound), quietText, floorP99.format(formatMS),
		verdict(worstP99 <= ms(targetP99)))
	renderFloorTargets(b, o, res)
	var anon, file float64
	for _, m := range res.Measurements {
		if m.Server == fencegateServer {
			anon, file = max(anon, mib(m.Memory.Anon)), max(file, mib(m.Memory.File))
		}
	}
	fmt.Fprintf(b, "| peak RSS ≤ %d MiB | %.1f MiB (VmHWM); after the runs at most %.1f MiB anonymous (heap, stacks) "+
		"and %.1f MiB file-backed (the binary's pages) | %s |\n\n",
		targetRSS>>20, peak/(1<<20), anon, file, verdict(peak <= targetRSS))
}

// renderFloorTargets says whether fencegate comes close enough to the
// floor, each ratio taken round by round, with the allow-all webhook's
// ratio beside it.
func renderFloorTargets(b *strings.Builder, o Options, res results) {
	if len(res.Baselines) == 0 {
		return
	}
	// worst is the scenario whose median ratio of value to the floor's is
	// least good (lowest when higher is better, highest otherwise), among
	// the scenarios that have a ratio; ok is false when none has.
	worst := func(value func(measurement) float64, higherIsBetter bool) (w spread, at string, ok bool) {
		floor := baseline(res, floorServer, value)
		for _, sc := range scenarios {
			r := spreadOf(ratios(byRound(res.Measurements, fencegateServer, sc, value), floor))
			if r.n == 0 {
				continue
			}
			if !ok || (higherIsBetter && r.med < w.med) || (!higherIsBetter && r.med > w.med) {
				w, at, ok = r, sc.String(), true
			}
		}
		return w, at, ok
	}
	allowAllRatio := func(value func(measurement) float64) string {
		return spreadOf(ratios(baseline(res, allowAllServer, value), baseline(res, floorServer, value))).format(formatRatio)
	}
	row := func(target, measured string, met bool) {
		fmt.Fprintf(b, "| %s | %s | %s |\n", target, measured, verdict(met))
	}
	target := fmt.Sprintf("≥ %.1f× the floor's requests/s at saturation", targetFloorThroughput)
	if tp, at, ok := worst(throughput, true); ok {
		row(target, fmt.Sprintf("%s in the weakest scenario (%s; rounds %s); the allow-all webhook %s; "+
			"server CPU per request (validate, active) %s µs, the floor's %s, the allow-all webhook's %s",
			formatRatio(tp.med), at, tp.format(formatRatio), allowAllRatio(throughput),
			spreadOf(values(byRound(res.Measurements, fencegateServer, scenario{validate, stateActive}, serverCPU))).format(formatFixed(0)),
			spreadOf(values(baseline(res, floorServer, serverCPU))).format(formatFixed(0)),
			spreadOf(values(baseline(res, allowAllServer, serverCPU))).format(formatFixed(0))),
			tp.med >= targetFloorThroughput)
	} else {
		row(target, "no run of fencegate and the floor in the same round", false)
	}
	target = fmt.Sprintf("p99 at %s req/s ≤ %.2f× the floor's", thousands(float64(o.Rate)), targetFloorP99)
	if p99, at, ok := worst(latencyP99, false); ok {
		row(target, fmt.Sprintf("%s in the slowest scenario (%s; rounds %s); the allow-all webhook %s",
			formatRatio(p99.med), at, p99.format(formatRatio), allowAllRatio(latencyP99)), p99.med <= targetFloorP99)
	} else {
		row(target, "no run of fencegate and the floor in the same round", false)
	}
}

// renderRuns lists every run.
func renderRuns(b *strings.Builder, o Options, res results) {
	b.WriteString("## Every run\n\n" +
		"| round | server | scenario | req/s | p50 ms | p90 ms | p99 ms | fixed rate kept | CPU µs/req | generator µs/req " +
		"| RSS MiB | foreign cores | stack cores | attempts | failed/wrong/requests |\n" +
		"|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, m := range append(slices.Clone(res.Measurements), res.Baselines...) {
		f, w, n, first := m.problems()
		fmt.Fprintf(b, "| %d | %s | %s | %s | %s | %s | %s | %.0f%% | %.0f | %.0f | %.1f | %.2f | %.2f | %d | %d/%d/%d |\n",
			m.Round, m.Server, m.Scenario, formatRate(m.Saturation.Throughput()),
			formatMS(latencyAt(0.5)(m)), formatMS(latencyAt(0.9)(m)), formatMS(latencyP99(m)),
			100*m.Latency.Throughput()/float64(o.Rate), micros(m.Saturation.ServerCPUPerRequest()),
			micros(m.Saturation.GeneratorCPU)/float64(max(m.Saturation.Requests, 1)),
			mib(m.Memory.Peak), m.foreignCores(), m.stackCores(), m.Attempts, f, w, n)
		if first != "" {
			fmt.Fprintf(b, "|  | first problem | %s | | | | | | | | | | | | |\n", strings.ReplaceAll(first, "|", "\\|"))
		}
	}
	b.WriteString("\n")
}

func scenarioTitle(sc scenario) string {
	switch sc {
	case scenario{validate, stateActive}:
		return "validate, active: the fence holder allows"
	case scenario{validate, stateFenced}:
		return "validate, fenced: a fenced cluster denies, naming the holder"
	case scenario{mutate, stateActive}:
		return "mutate, active: the fence holder stamps epoch and token (JSONPatch)"
	default:
		return "mutate, fenced: a fenced cluster patches nothing"
	}
}

func problemCell(ms []measurement, server string, sc scenario) string {
	var failed, wrong, requests int
	for _, m := range ms {
		if m.Server == server && m.Scenario == sc {
			f, w, n, _ := m.problems()
			failed, wrong, requests = failed+f, wrong+w, requests+n
		}
	}
	return fmt.Sprintf("%d / %d of %s", failed, wrong, thousands(float64(requests)))
}

func churnProblems(runs []churnRun, server string) string {
	var failed, wrong, requests int
	for _, c := range runs {
		if c.Server == server {
			failed, wrong, requests = failed+c.Result.Failed, wrong+c.Result.Wrong, requests+c.Result.Requests
		}
	}
	return fmt.Sprintf("%d / %d of %s", failed, wrong, thousands(float64(requests)))
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

func formatRate(v float64) string { return thousands(v) }

func formatMS(v float64) string {
	if v < 1 {
		return fmt.Sprintf("%.3f", v)
	}
	return fmt.Sprintf("%.2f", v)
}

func formatRatio(v float64) string { return fmt.Sprintf("%.2f×", v) }

func formatFixed(decimals int) func(float64) string {
	return func(v float64) string { return fmt.Sprintf("%.*f", decimals, v) }
}

// logSampling says what fencegate's log format writes of the decision lines.
func logSampling(format string) string {
	if format == "json" {
		return ": " + cli.JSONLogSampling
	}
	return ": every line"
}

// thousands rounds v and groups its digits by thousands: 12,345.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
