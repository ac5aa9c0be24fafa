package safety

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/tcpproxy"
)

// scripted is a schedule written by hand: east starts at epoch 2, above
// west and north at 1, so that east holds the fence within the first
// declarations whoever declares first. It lasts long enough for a takeover
// that waits out a lease after its last step.
func scripted(replicas int, steps ...step) schedule {
	return schedule{
		seed: uint64(time.Now().UnixNano()), replicas: replicas, domains: 1,
		epochs: []uint64{2, 1, 1},
		uids:   []string{"east-0001", "west-0002", "north-0003"},
		steps:  steps,
		end:    steps[len(steps)-1].at + 2*leaseTTL,
	}
}

// Steps of the scripted schedules.
var (
	// westTakesOver raises west above every epoch: east, reachable, is
	// told to step down.
	westTakesOver = step{at: time.Second, kind: raise, cluster: 1, epoch: 3}
	// eastPartitioned cuts east's first pod off for longer than a lease.
	eastPartitioned = step{at: 900 * time.Millisecond, kind: partition, cluster: 0, mode: tcpproxy.Drop, length: 3 * time.Second}
)

// ignoreFenced drops the agent's "fenced" writes: the agent believes its
// cluster stopped admitting and releases the fence, the engine goes on.
type ignoreFenced struct{ next fencestate.Writer }

func (w ignoreFenced) WriteFence(ctx context.Context, s fencestate.State) error {
	if s.Status == fencestate.Fenced {
		return nil
	}
	return w.next.WriteFence(ctx, s)
}

// outliveLease keeps the engine active past its lease: it drops every write
// that is not "active" and extends the validity of those that are.
type outliveLease struct{ next fencestate.Writer }

func (w outliveLease) WriteFence(ctx context.Context, s fencestate.State) error {
	if s.Status != fencestate.Active {
		return nil
	}
	s.ValidUntilNS += int64(time.Minute)
	return w.next.WriteFence(ctx, s)
}

// TestCheckerCatchesABrokenFence breaks the fence on purpose, the two ways
// a handover can go wrong, and expects the checker to say so: a checker
// that passes these histories would pass anything.
func TestCheckerCatchesABrokenFence(t *testing.T) {
	tests := map[string]struct {
		wrap  writerWrap
		steps []step
	}{
		"the engine ignores fenced: east goes on admitting after it released": {
			wrap:  func(w fencestate.Writer) fencestate.Writer { return ignoreFenced{w} },
			steps: []step{westTakesOver},
		},
		"the engine outlives its lease: partitioned east goes on admitting after west took over": {
			wrap:  func(w fencestate.Writer) fencestate.Writer { return outliveLease{w} },
			steps: []step{eastPartitioned, westTakesOver},
		},
	}
	srv := startLab(t, authoritytest.Options{LeaseTTL: leaseTTL}, 1)
	bodies := reviews(t)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			sched := scripted(1, tc.steps...)
			r := newRun(t, srv, sched, bodies, tc.wrap)
			// Without the handover order: with it, east's hold
			// controller, reading the engine that ignores fenced, never
			// holds, so east never releases and its lease ends first.
			r.unordered = true
			// West must take over for east's admissions to overlap its
			// own: on a loaded machine that can come after the schedule.
			r.awaited = r.held[1].Load
			h := r.play()
			checked := Check(h.Admissions)
			found := false
			for _, v := range checked.Violations {
				found = found || v.Rule == RuleOverlap
			}
			if !found {
				t.Errorf("the checker found no %s in a history with a broken fence (%d admitted, %d handovers); schedule: %s",
					RuleOverlap, checked.Admissions, checked.Handovers, sched)
			}
		})
	}
}

// TestOneReleaseForEveryPod: a cluster runs several agents (the chart's
// replicas, and the old and new pods of a rollout), each with a lease of
// its own. When one pod is told CLUSTER_FENCED and releases, the fence
// must not move while another pod of the same cluster, cut off from the
// authority, may still admit until its own lease runs out.
func TestOneReleaseForEveryPod(t *testing.T) {
	tests := map[string]schedule{
		"two replicas, one partitioned": scripted(2,
			step{at: time.Second, kind: partition, cluster: 0, replica: 1, mode: tcpproxy.Drop, length: 3 * time.Second},
			westTakesOver),
		"a rollout whose old pod is partitioned": scripted(1,
			eastPartitioned,
			step{at: time.Second, kind: raise, cluster: 0, epoch: 3, preStop: 3 * time.Second},
			step{at: 1500 * time.Millisecond, kind: raise, cluster: 1, epoch: 4}),
	}
	srv := startLab(t, authoritytest.Options{LeaseTTL: leaseTTL}, 1)
	bodies := reviews(t)
	for name, sched := range tests {
		t.Run(name, func(t *testing.T) {
			h := newRun(t, srv, sched, bodies, nil).play()
			if r := Check(h.Admissions); len(r.Violations) > 0 {
				t.Error(unsafe(sched, h, r, "a scripted schedule"))
			}
		})
	}
}

// TestLateCommitsAreRefusedAfterAFailback: east's pods keep running while
// the fence goes to west and comes back to them (in-place failovers, as
// fencegate failover does), and their gated writers' late commits assert
// tokens of every hold east had. Those decided under the first hold reach
// east's engines while east holds the fence again, with a newer token:
// they are refused as stale, and none is admitted.
func TestLateCommitsAreRefusedAfterAFailback(t *testing.T) {
	srv := startLab(t, authoritytest.Options{LeaseTTL: leaseTTL}, 1)
	var r *run
	sched := scripted(1,
		step{at: time.Second, kind: failover, cluster: 1, epoch: 3},
		// The fence comes back only once west has held it.
		step{at: 4 * time.Second, kind: failover, cluster: 0, epoch: 4, awaits: func() bool { return r.held[1].Load() }})
	sched.end += 2 * leaseTTL
	r = newRun(t, srv, sched, reviews(t), nil)
	h := r.play()
	checked := Check(h.Admissions)
	if len(checked.Violations) > 0 {
		t.Fatal(unsafe(sched, h, checked, "a scripted schedule"))
	}
	t.Logf("%d admitted, %d handovers, %d late commits admitted under their token, %d refused as stale", checked.Admissions, checked.Handovers, checked.Asserted, h.Stale)
	if checked.Handovers < 2 || h.Stale == 0 {
		var b strings.Builder
		h.Write(&b)
		t.Errorf("%d handovers and %d late commits refused as stale: want the fence back on east and stale writes refused there\n%s", checked.Handovers, h.Stale, b.String())
	}
}
