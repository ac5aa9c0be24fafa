package safety

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencegate/fencegate/authority/authoritytest"
)

// The environment variables that choose the histories.
const (
	// runsEnv sets how many histories TestRandomizedFailover runs.
	runsEnv = "FENCEGATE_SAFETY_RUNS"
	// seedEnv replays the one history of that seed.
	seedEnv = "FENCEGATE_SAFETY_SEED"
	// replicasEnv sets the number of pods per cluster; unset, each history
	// draws one or two from its seed.
	replicasEnv = "FENCEGATE_SAFETY_REPLICAS"
	// defaultRuns keeps the test at about three minutes under the race
	// detector: each scenario twice.
	defaultRuns = 2 * int(scenarios)
	// minRunsForCases is the number of histories from which every
	// nemesis must have reached its case at least once.
	minRunsForCases = 20
	// defaultBase is where the default run's seeds start.
	defaultBase = 1 << 40
)

// seeds returns the seeds of the histories to run.
func seeds(t *testing.T) []uint64 {
	t.Helper()
	if s := os.Getenv(seedEnv); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: want the seed that a failed history printed: %v", seedEnv, s, err)
		}
		return []uint64{seed}
	}
	runs := defaultRuns
	// The default run (make test's) plays the same histories every time,
	// so that it judges the code, not the luck of a draw; a run asked
	// for by its length (make safety) draws new ones.
	base := func() uint64 { return defaultBase }
	if s := os.Getenv(runsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of histories, at least 1", runsEnv, s)
		}
		runs, base = n, rand.Uint64
	}
	// Each scenario in turn (a seed's scenario is the seed modulo
	// scenarios), so that every one is played in a fair share.
	out := make([]uint64, runs)
	for i := range out {
		out[i] = (base()+uint64(i))/uint64(scenarios)*uint64(scenarios) + uint64(i)%uint64(scenarios)
	}
	return out
}

// replicas returns the number of pods per cluster, 0 to draw it per
// history.
func replicas(t *testing.T) int {
	t.Helper()
	s := os.Getenv(replicasEnv)
	if s == "" {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 3 {
		t.Fatalf("%s=%q: want 1, 2 or 3 pods per cluster", replicasEnv, s)
	}
	return n
}

// unsafe describes a history that broke a rule, with what it takes to
// replay it.
func unsafe(sched schedule, h History, r Report, replay string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "unsafe history; %s\nschedule: %s\nviolations:\n", replay, sched)
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "  %s\n", v)
	}
	h.Write(&b)
	return b.String()
}

// linearizabilityTimeout bounds the Porcupine check of one history: a
// history with many calls of unknown outcome can take the checker long,
// and an Unknown result is counted, not failed.
const linearizabilityTimeout = 10 * time.Second

// judgement is everything the checkers found in one history.
type judgement struct {
	admissions Report
	actions    ActionReport
	calls      Linearizability
}

// judge runs every checker on h: the admissions, the actions against each
// other and against the authority's grants, and the authority's answers
// for linearizability.
func judge(h History) judgement {
	j := judgement{
		admissions: Check(h.Admissions),
		actions:    CheckActions(h.Actions, h.Grants, h.Granted, takeoverGrace),
		calls:      CheckLinearizable(h.Calls, linearizabilityTimeout),
	}
	return j
}

// violations are all the rules h broke, as one Report for unsafe.
func (j judgement) violations() Report {
	r := j.admissions
	r.Violations = append(slices.Clone(r.Violations), j.actions.Violations...)
	if j.calls.Result == porcupine.Illegal {
		r.Violations = append(r.Violations, Violation{Rule: RuleNotLinearizable, Detail: fmt.Sprintf(
			"the %d declarations and releases (%d of unknown outcome) are no linearizable history of one fence per domain", j.calls.Calls, j.calls.Unknown)})
	}
	return r
}

// TestRandomizedFailover plays randomized histories of epoch raises,
// authority restarts, partitions, operators and hostile callers, authority
// replicas' clocks set apart and stepped, and copies of clusters restored
// from backups, under admission load, and checks each one: no two clusters
// (a restored copy counts as another) admit for one domain at once, and
// tokens only grow. A history's pods serve one to three domains, whose
// holders differ and which fail over on their own.
func TestRandomizedFailover(t *testing.T) {
	// A failing history prints itself with its seed: that is the record.
	// The authority's log of hundreds of histories would bury it.
	srv := startLab(t, authoritytest.Options{LeaseTTL: leaseTTL, ClusterGenerationPeriod: generationPeriod, Quiet: true}, labReplicas)
	bodies := reviews(t)
	list, pods := seeds(t), replicas(t)
	var total Report
	// reached counts, by case, the histories in which a nemesis reached
	// the case it exists for.
	reached := map[string]int{}
	var actions, judged, calls, unknownCalls, undecided, runsActed, writes, fencedWrites, cancelled, refusedWrites, holdErrors, resumeWaits, awaited, awaitTimeouts, withdrawalsRefused int64
	var leaseFailures, brokenReloads, refusedReloads, relabels, acrossHolders, failbacks int64
	steps, events, denied, stale, multi, manyDomains, restored, toCopies, quick, kept, balanced := 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
	kinds := map[stepKind]int{}
	began := time.Now()
	for i, seed := range list {
		sched := plan(seed, pods, nemeses{clocks: true, restores: true})
		playing := time.Now()
		h := newRun(t, srv, sched, bodies, nil).play()
		played := time.Since(playing)
		j := judge(h)
		t.Logf("played in %s, judged in %s", played.Round(time.Millisecond), (time.Since(playing) - played).Round(time.Millisecond))
		r := j.admissions
		total.Admissions += r.Admissions
		total.Tokens += r.Tokens
		total.Handovers += r.Handovers
		total.InFlight += r.InFlight
		total.Asserted += r.Asserted
		stale += h.Stale
		actions += int64(j.actions.Actions)
		judged += int64(j.actions.Judged)
		calls += int64(j.calls.Calls)
		unknownCalls += int64(j.calls.Unknown)
		if j.calls.Result == porcupine.Unknown {
			undecided++
		}
		c := h.Counts
		runsActed += c.Runs
		writes += c.Writes
		fencedWrites += c.FencedWrites
		cancelled += c.CancelledWrites
		refusedWrites += c.RefusedWrites
		holdErrors += c.HoldErrors
		resumeWaits += c.ResumeWaits
		awaited += c.HandoversAwaited
		awaitTimeouts += c.HandoverTimeouts
		withdrawalsRefused += c.WithdrawalsRefused
		leaseFailures += c.LeaseFailures
		brokenReloads += c.BrokenReloads
		refusedReloads += c.RefusedReloads
		relabels += c.Relabels
		acrossHolders += c.AcrossHolders
		failbacks += c.Failbacks
		for what, ok := range map[string]bool{
			"a late commit refused as stale":                               h.Stale > 0,
			"a failover to a restored copy":                                c.CopyHeld,
			"a holder that could not withdraw its Lease's hold":            c.WithdrawalsRefused > 0,
			"a grant after an expiry whose holder waited out the grace":    c.ResumeWaits > 0,
			"a broken hold policy refused by every engine told to load it": c.BrokenReloads > 0 && c.RefusedReloads == c.BrokenReloads,
			"a namespace relabelled between domains of two holders":        c.AcrossHolders > 0,
			"a holder that released once its objects were held":            c.HandoversAwaited > 0,
			"a gated write cancelled when its hold ended":                  c.CancelledWrites > 0,
		} {
			if ok {
				reached[what]++
			}
		}
		steps += len(sched.steps)
		for _, st := range sched.steps {
			kinds[st.kind]++
		}
		for _, ev := range h.Events {
			if strings.Contains(ev.What, "is restored from its backup") {
				restored++
			}
			if strings.Contains(ev.What, "fails over to the copy") {
				toCopies++
			}
			if strings.Contains(ev.What, balancedCalls) {
				balanced++
			}
		}
		if sched.replicas > 1 {
			multi++
		}
		if sched.domains > 1 {
			manyDomains++
		}
		if sched.quick {
			quick++
		}
		kept += h.KeptLeases
		events += len(h.Events)
		denied += h.Denied
		t.Logf("history %d/%d, seed %d: %d pod(s) per cluster, %d domain(s), %d steps, %d admitted (%d tokens, %d handovers), %d denied, %d actions (%d judged against the grants), %d calls to the authority %s",
			i+1, len(list), seed, sched.replicas, sched.domains, len(sched.steps), r.Admissions, r.Tokens, r.Handovers, h.Denied,
			j.actions.Actions, j.actions.Judged, j.calls.Calls, j.calls.Result)
		if r := j.violations(); len(r.Violations) > 0 {
			replay := fmt.Sprintf("replay its schedule with %s=%d", seedEnv, seed)
			if pods != 0 {
				replay += fmt.Sprintf(" %s=%d", replicasEnv, pods)
			}
			t.Fatal(unsafe(sched, h, r, replay))
		}
	}
	t.Logf("%d histories (%d of them with several pods per cluster, %d with several domains, %d with agents declaring every %s) in %s: %d admissions checked (%d tokens, %d handovers, %d of them with an Admit of the old holder still in flight), %d denials, "+
		"%d late commits admitted under the token they were decided under and %d refused as stale, %d answers that kept a holder's running lease, %d pods calling two replicas in turn, "+
		"%d schedule steps (%d raises, %d in-place failovers, %d partitions, %d authority restarts, %d operators' or hostile callers', %d clock steps, %d backups of which %d restored beside their cluster and %d failed over to), %d events",
		len(list), multi, manyDomains, quick, quickDeclareInterval, time.Since(began).Round(time.Second), total.Admissions, total.Tokens, total.Handovers, total.InFlight, denied,
		total.Asserted, stale, kept, balanced, steps, kinds[raise], kinds[failover], kinds[partition], kinds[restart], kinds[operate], kinds[clockStep], kinds[restore], restored, toCopies, events)
	t.Logf("%d actions checked (%d actuator runs, %d gated writes of which %d cancelled when their hold ended and %d refused by the webhook, %d refused by the gate), %d judged against the authority's grants; "+
		"%d declarations and releases checked for linearizability (%d of unknown outcome; %d histories too large to decide in %s); "+
		"%d handovers awaited until the objects were held (%d ran out of lease), %d hold decisions that failed, %d decisions held until the takeover grace ended; "+
		"nemeses: %d holders whose Lease writes failed (%d withdrawals refused), %d engines told to reload a broken hold policy (%d refused it), %d namespaces relabelled (%d between two holders), %d failbacks",
		actions, runsActed, writes, cancelled, refusedWrites, fencedWrites, judged,
		calls, unknownCalls, undecided, linearizabilityTimeout,
		awaited, awaitTimeouts, holdErrors, resumeWaits,
		leaseFailures, withdrawalsRefused, brokenReloads, refusedReloads, relabels, acrossHolders, failbacks)
	for _, what := range slices.Sorted(maps.Keys(reached)) {
		t.Logf("%s: in %d of %d histories", what, reached[what], len(list))
	}
	if len(list) >= minRunsForCases {
		for _, what := range []string{
			"a late commit refused as stale", "a failover to a restored copy", "a holder that could not withdraw its Lease's hold",
			"a grant after an expiry whose holder waited out the grace", "a broken hold policy refused by every engine told to load it",
			"a namespace relabelled between domains of two holders", "a holder that released once its objects were held",
		} {
			if reached[what] == 0 {
				t.Errorf("no history of %d reached %s: its nemesis never reached the case it exists for", len(list), what)
			}
		}
	}
	if actions == 0 {
		t.Error("no cluster acted: the checker of actions had nothing to check")
	}
	if total.Admissions == 0 {
		t.Error("no history admitted anything: the checker had nothing to check")
	}
	if balanced == 0 {
		t.Errorf("no pod called two of the authority's %d replicas in turn", labReplicas)
	}
}
