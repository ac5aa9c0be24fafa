package safety

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authority/authoritytest"
)

// offsetClock is a replica's wall clock: the real time moved by an offset
// the clock nemesis sets and steps. Its monotonic clock stays the real
// one, as a stepped wall clock leaves a machine's monotonic clock alone.
type offsetClock struct{ offset atomic.Int64 }

// Now is the real time moved by the offset.
func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// Since is the time from t by this clock.
func (c *offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// set moves the clock to d off the real time.
func (c *offsetClock) set(d time.Duration) { c.offset.Store(int64(d)) }

// step moves the clock by d.
func (c *offsetClock) step(d time.Duration) { c.offset.Add(int64(d)) }

// Clock nemesis: the replicas' wall clocks start set apart by more than the
// agents' lease margin, and steps of a schedule move one of them forward.
const (
	// maxOffset bounds a replica's first offset either way.
	maxOffset = 3 * time.Second
	// maxClockStep bounds a forward step: several leases.
	maxClockStep = 3 * leaseTTL
)

// drawOffsets sets a history's replica clocks apart: each at least twice
// the lease margin from the real time, either way.
func drawOffsets(rng *rand.Rand, replicas int) []time.Duration {
	out := make([]time.Duration, replicas)
	for i := range out {
		d := 2*leaseMargin + upTo(rng, maxOffset-2*leaseMargin)
		if rng.IntN(2) == 0 {
			d = -d
		}
		out[i] = d
	}
	return out
}

// TestReplicaClockSkewNeverOverlaps runs the checker's workload against
// three replicas of the authority on one etcd, whose wall clocks are set
// apart by more than the lease margin and stepped forward during each
// history, with the agents of each cluster spread over the replicas: no two
// clusters ever admit at once, because each replica judges a lease's end
// on its own monotonic clock.
func TestReplicaClockSkewNeverOverlaps(t *testing.T) {
	srv := startLab(t, authoritytest.Options{LeaseTTL: leaseTTL, ClusterGenerationPeriod: generationPeriod, Quiet: true}, 3)
	bodies := reviews(t)
	var total Report
	steps := 0
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		sched := plan(seed, 2, nemeses{clocks: true})
		// Every history steps a replica's clock forward by a whole
		// lease halfway through, whatever else it draws.
		sched.steps = append(sched.steps, step{at: chaos / 2, kind: clockStep, replica: int(seed) % labReplicas, length: leaseTTL + leaseMargin})
		slices.SortStableFunc(sched.steps, func(a, b step) int { return cmp.Compare(a.at, b.at) })
		h := newRun(t, srv, sched, bodies, nil).play()
		r := Check(h.Admissions)
		total.Admissions += r.Admissions
		total.Handovers += r.Handovers
		for _, st := range sched.steps {
			if st.kind == clockStep {
				steps++
			}
		}
		if len(r.Violations) > 0 {
			t.Fatal(unsafe(sched, h, r, "replay it with TestReplicaClockSkewNeverOverlaps"))
		}
	}
	t.Logf("5 histories on 3 replicas with clocks set apart and %d forward steps: %d admissions checked, %d handovers", steps, total.Admissions, total.Handovers)
	if total.Admissions == 0 || total.Handovers == 0 {
		t.Errorf("%d admissions and %d handovers: the histories did not exercise the fence", total.Admissions, total.Handovers)
	}
}
