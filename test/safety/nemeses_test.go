package safety

import (
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/fencegate/fencegate/fencestate"
)

// brokenHoldPolicy is a custom rule that conflicts with the shipped
// CronJob rule: it compiles, admission and reconcile decisions still work,
// and every hold decision of a CronJob fails (a rule's two values for one
// key). An engine must refuse it and keep its last good revision.
const brokenHoldPolicy = `package fencegate.hold

rules["cronjob"] := {"fields": [{"path": ["spec", "suspend"], "value": false}], "activity": set()} if {
	obj.kind == "CronJob"
}
`

// nemesisCounts are what the nemeses of the actions did in one history.
type nemesisCounts struct {
	// leaseFailures counts the pods whose Lease writes were made to fail
	// while they held a domain, failedOver the failovers away from them.
	leaseFailures atomic.Int64
	// brokenReloads counts the engines told to reload a broken hold
	// policy, refusedReloads those that refused it.
	brokenReloads, refusedReloads atomic.Int64
	// relabels counts the namespaces relabelled, acrossHolders those whose
	// old and new domains were held by different clusters.
	relabels, acrossHolders atomic.Int64
	// failbacks counts the fences that went to another cluster and back.
	failbacks atomic.Int64
}

// holderOf is the cluster whose serving pods' engines say they hold
// domain d, -1 for none.
func (r *run) holderOf(d int) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	for c, pods := range r.serving {
		for _, p := range pods {
			if p.engine == nil {
				continue
			}
			if st, ok := p.engine.Fence(r.domains[d]); ok && st.Status == fencestate.Active {
				return c
			}
		}
	}
	return -1
}

// failOverNow fails domain d over to cluster c in place, above every
// epoch declared so far.
func (r *run) failOverNow(c, d int) {
	r.mu.Lock()
	var top uint64
	for _, e := range r.epochs {
		top = max(top, e[d])
	}
	r.mu.Unlock()
	r.failover(step{kind: failover, cluster: c, domain: d, epoch: top + 1})
}

// other is a cluster other than c, drawn from the step.
func other(c int, st step) int {
	if c < 0 {
		return st.cluster
	}
	return (c + 1 + st.replica%(len(clusterNames)-1)) % len(clusterNames)
}

// leaseFail is the Lease nemesis: the pods of the cluster that holds the
// step's domain can no longer write their membership Leases (their
// published hold stays as it was, their withdrawal fails), and the domain
// is failed over away from them: the holder cannot withdraw, so it must
// not release, and the fence moves only once its leases ended.
func (r *run) leaseFail(st step) {
	c := r.holderOf(st.domain)
	if c < 0 {
		r.event("no cluster holds domain %d: no Lease fails", st.domain)
		return
	}
	r.mu.Lock()
	pods := slices.Clone(r.serving[c])
	r.mu.Unlock()
	for _, p := range pods {
		p.leaseFails.Store(true)
	}
	r.nemeses.leaseFailures.Add(1)
	r.event("the membership Leases of %s can no longer be written", clusterNames[c])
	r.background.Go(func() {
		r.failOverNow(other(c, st), st.domain)
		select {
		case <-time.After(st.length):
		case <-r.ending:
		}
		for _, p := range pods {
			p.leaseFails.Store(false)
		}
		r.event("the membership Leases of %s can be written again", clusterNames[c])
	})
}

// breakPolicy is the policy nemesis: the cluster that holds the step's
// domain gets a hold policy whose decision fails, every engine of it is
// told to reload, and the domain is failed over away from it: its engines
// must keep the last good revision, or nothing would be held there. No pod
// of the cluster starts while the policy is broken (its rollouts wait): a
// pod would refuse to start on it. The policy is mended after a while.
func (r *run) breakPolicy(st step) {
	c := r.holderOf(st.domain)
	if c < 0 {
		c = st.cluster
	}
	r.rolling[c].Lock()
	path := filepath.Join(r.policyDirs[c], "broken_hold.rego")
	if err := os.WriteFile(path, []byte(brokenHoldPolicy), 0o600); err != nil {
		r.t.Error(err)
	}
	r.mu.Lock()
	pods := slices.Clone(r.serving[c])
	r.mu.Unlock()
	refused := 0
	for _, p := range pods {
		if p.engine == nil {
			continue
		}
		r.nemeses.brokenReloads.Add(1)
		if err := p.engine.Reload(r.t.Context()); err != nil {
			refused++
			r.nemeses.refusedReloads.Add(1)
		}
	}
	r.event("%s's hold policy is broken: %d of %d engines refused it", clusterNames[c], refused, len(pods))
	r.background.Go(func() {
		defer r.rolling[c].Unlock()
		r.failOverNow(other(c, st), st.domain)
		select {
		case <-time.After(st.length):
		case <-r.ending:
		}
		if err := os.Remove(path); err != nil {
			r.t.Error(err)
		}
		for _, p := range pods {
			if p.engine != nil {
				_ = p.engine.Reload(r.t.Context())
			}
		}
		r.event("%s's hold policy is mended", clusterNames[c])
	})
}

// relabel is the relabel nemesis: the moving namespace is relabelled to
// another domain on every cluster at once, as one manifest applied
// everywhere.
func (r *run) relabel(st step) {
	if len(r.domains) < 2 {
		return
	}
	w := r.world
	now := r.since()
	from, _ := w.clusters[0].namespaceLabel("ns-moving")
	fi := slices.Index(r.domains, from)
	to := (fi + 1 + st.replica%(len(r.domains)-1)) % len(r.domains)
	for _, kc := range w.clusters {
		kc.mu.Lock()
		kc.namespaces["ns-moving"].set(now, r.domains[to])
		kc.mu.Unlock()
	}
	r.nemeses.relabels.Add(1)
	if a, b := r.holderOf(fi), r.holderOf(to); a != b {
		r.nemeses.acrossHolders.Add(1)
	}
	r.event("namespace ns-moving is relabelled from domain %d to domain %d", fi, to)
}

// namespaceLabel is the label of namespace ns now.
func (kc *kcluster) namespaceLabel(ns string) (string, bool) {
	kc.mu.Lock()
	defer kc.mu.Unlock()
	return kc.namespaces[ns].latest()
}

// failback fails the step's domain over to another cluster and, once that
// one held it, back to the cluster that held it: the late commits decided
// under the first hold then reach engines that hold the fence again, with
// a newer token, and must be refused as stale.
func (r *run) failback(st step) {
	c := r.holderOf(st.domain)
	if c < 0 {
		r.event("no cluster holds domain %d: no failback", st.domain)
		return
	}
	to := other(c, st)
	r.background.Go(func() {
		r.failOverNow(to, st.domain)
		for deadline := time.Now().Add(3 * leaseTTL); r.holderOf(st.domain) != to && time.Now().Before(deadline); {
			select {
			case <-r.ending:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		select {
		case <-r.ending:
			return
		case <-time.After(st.length):
		}
		r.failOverNow(c, st.domain)
		r.nemeses.failbacks.Add(1)
	})
}
