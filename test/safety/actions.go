package safety

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Action is one thing a cluster did for a fence domain: an actuator's run
// (a CronJob's Job, a Flux reconciliation, …) or a gated writer's write.
type Action struct {
	// Actor is who acted, e.g. "east cronjob ns-0/nightly" or
	// "west writer/1".
	Actor string
	// Cluster is the acting cluster's UID, marked "#<label>" for a copy
	// restored from a backup (see Admission.Cluster).
	Cluster string
	// Domain is the fence domain acted for.
	Domain string
	// Token is the fencing token the action was allowed under: the fence
	// token of the hold controller's release of the actuator's object, or
	// the token of the gate's hold the write was decided under.
	Token uint64
	// Start and End are when it began and ended, since the history began.
	Start, End time.Duration
}

func (a Action) String() string {
	return fmt.Sprintf("%s (token %d) in [%s, %s]", a.Actor, a.Token, seconds(a.Start), seconds(a.End))
}

// uid is the UID of the acting cluster, which a copy shares.
func (a Action) uid() string {
	uid, _, _ := strings.Cut(a.Cluster, "#")
	return uid
}

// Grant is a grant of a domain's fence as the authority's own history
// (GetFenceHistory) records it.
type Grant struct {
	Domain string
	// UID is the cluster the fence was granted to, Token its fencing token.
	UID   string
	Token uint64
	// AfterExpiry is set for a grant that followed the end of the previous
	// holder's lease (grant "after_expiry").
	AfterExpiry bool
}

// The rules an action breaks.
const (
	// RuleActionsOverlap: two clusters acted for one domain at overlapping
	// times.
	RuleActionsOverlap = "two-clusters-acted"
	// RuleNotGranted: the token an action was allowed under was not
	// granted to the acting cluster in the authority's history.
	RuleNotGranted = "acted-under-a-token-not-granted"
	// RuleAfterNextGrant: an action ended after the authority had granted
	// the domain's next token (beyond the takeover grace of a grant after
	// an expiry).
	RuleAfterNextGrant = "acted-after-the-next-grant"
)

// ActionReport is what CheckActions found.
type ActionReport struct {
	// Actions is the number of actions checked, Judged how many of them
	// were placed against the authority's grants (the rest were allowed
	// under a token whose successor nobody was seen to be told of).
	Actions, Judged int
	// Violations are the broken rules.
	Violations []Violation
}

// CheckActions judges the actions of a history:
//
//  1. Per domain, no two clusters (a restored copy counts as another) act
//     at overlapping times: [Start, End] of one never meets another's.
//  2. Each action's token was granted to its cluster in the authority's
//     history (grants, every domain's, in token order).
//  3. Each action ends before the domain's next grant after its token, as
//     far as the history shows it: granted is when each token's grant was
//     certainly committed (the end of the first call answered with it),
//     so an action that ends later certainly outlived its hold. A grant
//     after an expiry is allowed grace more: the previous holder, cut off
//     from the authority, starts suspending its actuators only when its
//     lease's validity ends, and the new holder keeps its own suspended
//     until the grant's time plus the takeover grace (State.ResumeAtNS),
//     so that old holder's runs may still end within it (docs/design.md,
//     "Handover order"). Rule 1 still holds them to end before the new
//     holder acts.
func CheckActions(actions []Action, grants []Grant, granted map[uint64]time.Duration, grace time.Duration) ActionReport {
	r := ActionReport{Actions: len(actions)}
	count := map[string]int{}
	add := func(rule, format string, args ...any) {
		if count[rule]++; count[rule] <= maxPerRule {
			r.Violations = append(r.Violations, Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)})
		}
	}

	byDomain := map[string][]Action{}
	for _, a := range actions {
		byDomain[a.Domain] = append(byDomain[a.Domain], a)
	}
	for _, d := range slices.Sorted(maps.Keys(byDomain)) {
		list := byDomain[d]
		slices.SortFunc(list, func(a, b Action) int { return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End)) })
		// open are the actions that may still meet a later one: by
		// cluster, the one of each that ends last.
		open := map[string]Action{}
		for _, a := range list {
			for _, c := range slices.Sorted(maps.Keys(open)) {
				o := open[c]
				if c != a.Cluster && o.End >= a.Start {
					add(RuleActionsOverlap, "domain %s: %s of %s and %s of %s overlap", d, o, o.Cluster, a, a.Cluster)
				}
			}
			if o, ok := open[a.Cluster]; !ok || a.End > o.End {
				open[a.Cluster] = a
			}
		}
	}

	perDomain := map[string][]Grant{}
	for _, g := range grants {
		perDomain[g.Domain] = append(perDomain[g.Domain], g)
	}
	for _, gs := range perDomain {
		slices.SortFunc(gs, func(a, b Grant) int { return cmp.Compare(a.Token, b.Token) })
	}
	for _, a := range actions {
		gs := perDomain[a.Domain]
		i, found := slices.BinarySearchFunc(gs, a.Token, func(g Grant, t uint64) int { return cmp.Compare(g.Token, t) })
		if !found || gs[i].UID != a.uid() {
			holder := "nobody"
			if found {
				holder = gs[i].UID
			}
			add(RuleNotGranted, "domain %s: %s of %s: the authority granted token %d to %s", a.Domain, a, a.Cluster, a.Token, holder)
			continue
		}
		if i+1 == len(gs) {
			r.Judged++
			continue
		}
		next := gs[i+1]
		at, seen := granted[next.Token]
		if !seen {
			continue
		}
		r.Judged++
		allowed := at
		if next.AfterExpiry {
			allowed += grace
		}
		if a.End > allowed {
			how := "after a release"
			if next.AfterExpiry {
				how = fmt.Sprintf("after an expiry, plus the takeover grace %s", grace)
			}
			add(RuleAfterNextGrant, "domain %s: %s of %s ended after %s: the authority had granted token %d to %s by %s (%s)",
				a.Domain, a, a.Cluster, seconds(allowed), next.Token, next.UID, seconds(at), how)
		}
	}
	slices.SortStableFunc(r.Violations, func(a, b Violation) int { return cmp.Compare(a.Rule, b.Rule) })
	return r
}
