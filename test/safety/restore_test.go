package safety

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authority/authoritytest"
)

// backup is what a backup of a cluster's control plane keeps of fencegate:
// the epochs its pods declared and the generations its Fences showed, by
// domain.
type backup struct {
	epochs, generations []uint64
	// label names the copy restored from it.
	label string
}

// restore backs cluster st.cluster up now and, once the authority has
// moved the cluster's generation on twice in every domain (older backups
// than that are what restore detection tells apart; see docs/design.md),
// starts a copy of the cluster from the backup beside it, with as many
// pods, until the history ends. The copy has the cluster's name, UID,
// epochs and identity: only the generations it presents tell it apart, and
// it must admit nothing, unless an operator fails domain st.domain over to
// it (st.epoch): then it takes that domain's fence over from the original,
// and the two never admit at once.
func (r *run) restore(st step) {
	c := st.cluster
	r.mu.Lock()
	r.copies[c]++
	b := &backup{
		epochs: slices.Clone(r.serving[c][0].epochs), generations: slices.Clone(r.generations[c]),
		label: fmt.Sprintf("restored-%d", r.copies[c]),
	}
	r.mu.Unlock()
	r.event("%s is backed up at epochs %v, generations %v", clusterNames[c], b.epochs, b.generations)
	r.background.Go(func() {
		moved, seen := make([]int, len(b.generations)), slices.Clone(b.generations)
		for slices.Min(moved) < 2 {
			select {
			case <-r.ending:
				r.event("the backup of %s is too recent to be told apart before the history ends: not restored", clusterNames[c])
				return
			case <-time.After(20 * time.Millisecond):
			}
			r.mu.Lock()
			for d, g := range r.generations[c] {
				if g != seen[d] {
					moved[d], seen[d] = moved[d]+1, g
				}
			}
			r.mu.Unlock()
		}
		r.event("a copy of %s (%s) is restored from its backup", clusterNames[c], b.label)
		epochs := slices.Clone(b.epochs)
		if st.epoch > 0 {
			// Above every epoch declared so far: the nemeses' own
			// failovers may have gone above the planned one.
			r.mu.Lock()
			for _, e := range r.epochs {
				st.epoch = max(st.epoch, e[st.domain]+1)
			}
			r.mu.Unlock()
			// The copy's pods start at the raised epoch of the domain:
			// an operator's failover to it. The copy and the original
			// are two actors for the checker; they must never both
			// admit.
			epochs[st.domain] = st.epoch
			r.event("an operator fails domain %d over to the copy of %s (%s) at epoch %d", st.domain, clusterNames[c], b.label, st.epoch)
		}
		for range r.sched.replicas {
			r.startPod(c, slices.Clone(epochs), b)
		}
	})
}

// TestFailoverToARestoredCopyNeverOverlaps: an operator fails over to a
// copy of the holder restored from a backup, which has the holder's name,
// UID and identity, while the original goes on running. The copy takes the
// fence over only once the original's leases ended, and the two never
// admit at once.
func TestFailoverToARestoredCopyNeverOverlaps(t *testing.T) {
	srv := startLab(t, authoritytest.Options{LeaseTTL: leaseTTL, ClusterGenerationPeriod: generationPeriod, Quiet: true}, 1)
	bodies := reviews(t)
	for _, replicas := range []int{1, 2} {
		// East holds the fence at epoch 2; the copy is started once the
		// authority moved east's generation on twice, at epoch 3.
		sched := scripted(replicas, step{at: 300 * time.Millisecond, kind: restore, cluster: 0, epoch: 3})
		sched.end += 4*generationPeriod + 2*leaseTTL
		r := newRun(t, srv, sched, bodies, nil)
		r.awaited = r.copyHeld.Load
		h := r.play()
		checked := Check(h.Admissions)
		if len(checked.Violations) > 0 {
			t.Fatal(unsafe(sched, h, checked, "replay it with TestFailoverToARestoredCopyNeverOverlaps"))
		}
		byCopy := 0
		for _, a := range h.Admissions {
			if strings.Contains(a.Cluster, "#") {
				byCopy++
			}
		}
		t.Logf("%d pod(s) per cluster: %d admitted, %d of them by the copy, %d handovers", replicas, checked.Admissions, byCopy, checked.Handovers)
		if byCopy == 0 || checked.Handovers == 0 {
			var b strings.Builder
			h.Write(&b)
			t.Errorf("the copy admitted %d times after %d handovers: the failover to it never happened; schedule: %s\n%s", byCopy, checked.Handovers, sched, b.String())
		}
	}
}
