package engine

import (
	"context"
	"fmt"
	"maps"
	"strings"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fencestate"
)

// view is what evaluations read: one policy revision, a snapshot of each
// served domain's fence state under it, and the snapshot that decides the
// objects of a domain this fencegate does not serve. It is immutable: a
// fence write builds a view with that domain's snapshot replaced (the
// others', partial evaluations and remembered decisions included, are
// shared), a reload one with every snapshot rebuilt.
type view struct {
	policy  *policy
	domains map[string]*snapshot
	// reads is what of an AdmissionReview the view's snapshots and the
	// engine read: all that parseReview parses.
	reads *pathTree
	// unserved has the state of a domain that is not served: unknown,
	// reason DOMAIN_NOT_SERVED, so that the policies refuse and hold its
	// objects, as they do for any unknown state.
	unserved *snapshot
}

// newView builds the view of revision p for the served domains, with each
// domain's state from states (none yet when missing).
func newView(ctx context.Context, p *policy, served []string, states map[string]fencestate.State) (*view, error) {
	v := &view{policy: p, domains: make(map[string]*snapshot, len(served))}
	for _, d := range served {
		var state *fencestate.State
		if s, ok := states[d]; ok {
			state = &s
		}
		snap, err := newSnapshot(ctx, p, state, nil)
		if err != nil {
			return nil, fmt.Errorf("domain %s: %w", d, err)
		}
		v.domains[d] = snap
	}
	unserved := notServed(served)
	snap, err := newSnapshot(ctx, p, &unserved, nil)
	if err != nil {
		return nil, fmt.Errorf("the state of a domain not served: %w", err)
	}
	v.unserved = snap
	v.reads = v.readPaths()
	return v, nil
}

// notServed is the state of a domain that the fencegate serving served
// does not serve.
func notServed(served []string) fencestate.State {
	return fencestate.State{
		Status: fencestate.Unknown,
		Reason: fencestate.ReasonDomainNotServed,
		Message: fmt.Sprintf("this cluster's fencegate does not serve the fence domain of this object (its %s label, or its namespace's); it serves %s: "+
			"label the object (or its namespace) with one of them, or add the domain to the release's domains", domain.Label, strings.Join(served, ", ")),
	}
}

// with is v with domain's snapshot replaced by snap.
func (v *view) with(domain string, snap *snapshot) *view {
	next := &view{policy: v.policy, domains: maps.Clone(v.domains), unserved: v.unserved, reads: v.reads}
	next.domains[domain] = snap
	if prev := v.domains[domain]; prev == nil || prev.inputPaths != snap.inputPaths {
		next.reads = next.readPaths()
	}
	return next
}

// readPaths is what of an AdmissionReview the engine and v's snapshots
// read.
func (v *view) readPaths() *pathTree {
	trees := []*pathTree{envelopePaths, v.unserved.inputPaths}
	for _, s := range v.domains {
		trees = append(trees, s.inputPaths)
	}
	return union(trees...)
}

// snapshot is the snapshot that decides the objects of domain d.
func (v *view) snapshot(d string) *snapshot {
	if s, ok := v.domains[d]; ok {
		return s
	}
	return v.unserved
}

// states are the fence states the served domains have.
func (v *view) states() map[string]fencestate.State {
	states := make(map[string]fencestate.State, len(v.domains))
	for d, s := range v.domains {
		if s.hasFence {
			states[d] = s.fence
		}
	}
	return states
}
