package safety

import (
	"fmt"
	"time"
)

// backup is what a backup of a cluster's control plane keeps of fencegate:
// the epoch its pods declared and the generation its Fence showed.
type backup struct {
	epoch, generation uint64
	// label names the copy restored from it.
	label string
}

// restore backs cluster st.cluster up now and, once the authority has
// moved the cluster's generation on twice (older backups than that are
// what restore detection tells apart; see docs/design.md), starts a copy of
// the cluster from the backup beside it, with as many pods, until the
// history ends. The copy has the cluster's name, UID, epoch and identity:
// only the generation it presents tells it apart, and it must admit
// nothing.
func (r *run) restore(st step) {
	c := st.cluster
	r.mu.Lock()
	r.copies[c]++
	b := &backup{epoch: r.serving[c][0].epoch, generation: r.generations[c], label: fmt.Sprintf("restored-%d", r.copies[c])}
	r.mu.Unlock()
	r.event("%s is backed up at epoch %d, generation %d", clusterNames[c], b.epoch, b.generation)
	r.background.Go(func() {
		moved, seen := 0, b.generation
		for moved < 2 {
			select {
			case <-r.ending:
				r.event("the backup of %s is too recent to be told apart before the history ends: not restored", clusterNames[c])
				return
			case <-time.After(20 * time.Millisecond):
			}
			r.mu.Lock()
			if g := r.generations[c]; g != seen {
				moved, seen = moved+1, g
			}
			r.mu.Unlock()
		}
		r.event("a copy of %s (%s) is restored from its backup", clusterNames[c], b.label)
		for range r.sched.replicas {
			r.startPod(c, b.epoch, b)
		}
	})
}
