package safety

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

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
	// defaultRuns keeps the test well under two minutes.
	defaultRuns = 20
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
	if s := os.Getenv(runsEnv); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a number of histories, at least 1", runsEnv, s)
		}
		runs = n
	}
	out := make([]uint64, runs)
	for i := range out {
		out[i] = rand.Uint64()
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
	steps, events, denied, stale, multi, manyDomains, restored, toCopies, quick, kept, balanced := 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
	kinds := map[stepKind]int{}
	began := time.Now()
	for i, seed := range list {
		sched := plan(seed, pods, nemeses{clocks: true, restores: true})
		h := newRun(t, srv, sched, bodies, nil).play()
		r := Check(h.Admissions)
		total.Admissions += r.Admissions
		total.Tokens += r.Tokens
		total.Handovers += r.Handovers
		total.InFlight += r.InFlight
		total.Asserted += r.Asserted
		stale += h.Stale
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
		t.Logf("history %d/%d, seed %d: %d pod(s) per cluster, %d domain(s), %d steps, %d admitted (%d tokens, %d handovers), %d denied",
			i+1, len(list), seed, sched.replicas, sched.domains, len(sched.steps), r.Admissions, r.Tokens, r.Handovers, h.Denied)
		if len(r.Violations) > 0 {
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
	if total.Admissions == 0 {
		t.Error("no history admitted anything: the checker had nothing to check")
	}
	if balanced == 0 {
		t.Errorf("no pod called two of the authority's %d replicas in turn", labReplicas)
	}
}
