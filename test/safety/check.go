package safety

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fencegate/fencegate/fencestate"
)

// Admission is one admitted Component create or update, as seen from
// outside the engine's Admit call that decided it.
type Admission struct {
	// Pod is the replica that admitted it, e.g. "east/2".
	Pod string
	// Cluster is the UID of the pod's cluster; for a copy of the cluster
	// restored from a backup, which has the same UID, the UID then "#" and
	// the copy's label: the checker counts the copy as another cluster.
	Cluster string
	// Domain is the fence domain of the admitted object, FenceDomain the
	// domain of the fence state the engine decided with: the same, or the
	// engine decided the object by another domain's fence.
	Domain, FenceDomain string
	// Start and End are when the Admit call began and returned, on the
	// monotonic clock, since the history began.
	Start, End time.Duration
	// Token is the fencing token the admission was stamped with (the
	// fencegate.dev/token annotation of the mutation).
	Token uint64
	// Status, Holder (a cluster UID) and FenceToken are the fence state
	// the engine decided with.
	Status     fencestate.Status
	Holder     string
	FenceToken uint64
	// Asserted is the write token the write asserted: the token of the
	// hold a gated writer decided it under; 0 for none.
	Asserted uint64
}

// uid is the UID of the pod's cluster, which a copy shares with the
// original: the holder a fence state names.
func (a Admission) uid() string {
	uid, _, _ := strings.Cut(a.Cluster, "#")
	return uid
}

func (a Admission) String() string {
	return fmt.Sprintf("%s token %d in [%s, %s]", a.Pod, a.Token, seconds(a.Start), seconds(a.End))
}

// The rules a Violation breaks.
const (
	// RuleNotHolding: the engine admitted while its own fence state did not
	// say that this cluster holds the fence.
	RuleNotHolding = "admitted-without-the-fence"
	// RuleOtherDomain: the engine decided an object by the fence of
	// another domain than the object's.
	RuleOtherDomain = "decided-by-another-domain"
	// RuleStamp: the token an admission was stamped with is not the token
	// of the fence state it was decided with.
	RuleStamp = "stamp-differs-from-fence"
	// RuleSharedToken: two clusters admitted with one token; tokens change
	// whenever the fence changes hands.
	RuleSharedToken = "token-of-two-clusters"
	// RuleOverlap: a cluster admitted with an older token after another
	// cluster had admitted with a newer one.
	RuleOverlap = "two-clusters-admitted"
	// RuleTokenRegressed: a cluster admitted with an older token after it
	// had admitted with a newer one.
	RuleTokenRegressed = "token-went-back"
	// RuleLateCommit: a write decided under an older token than the fence
	// state it was admitted with: a late commit the policies must refuse.
	RuleLateCommit = "late-commit-admitted"
)

// Violation is one broken rule, with the admissions that show it.
type Violation struct {
	// Rule is one of the Rule constants.
	Rule string
	// Detail says what happened, naming the admissions.
	Detail string
}

func (v Violation) String() string { return v.Rule + ": " + v.Detail }

// Report is what Check found in a history.
type Report struct {
	// Domains is the number of fence domains admitted for.
	Domains int
	// Admissions is the number of admissions checked.
	Admissions int
	// Tokens is the number of distinct tokens admitted with.
	Tokens int
	// Handovers counts the tokens, in token order, admitted by another
	// cluster than the previous token: the fence moved and both holders
	// admitted.
	Handovers int
	// InFlight counts the handovers at which an Admit call of the previous
	// holder was still running when the new holder's first one began.
	// That is allowed (see Check) and shows how close handovers come.
	InFlight int
	// Asserted counts the admissions of writes that asserted the token
	// they were decided under (the late commits admitted).
	Asserted int
	// Violations are the broken rules; empty when the history is safe.
	Violations []Violation
}

// maxPerRule bounds the violations reported per rule: one is enough to
// fail, a few help to see a pattern.
const maxPerRule = 5

// Check verifies the admissions of each fence domain on its own: the
// domains are independent fences, whose holders may admit at once. The
// counts of the Report are sums over the domains, and each violation names
// its domain.
func Check(admissions []Admission) Report {
	byDomain := map[string][]Admission{}
	for _, a := range admissions {
		byDomain[a.Domain] = append(byDomain[a.Domain], a)
	}
	var r Report
	for _, d := range slices.Sorted(maps.Keys(byDomain)) {
		one := checkDomain(byDomain[d])
		r.Domains++
		r.Admissions += one.Admissions
		r.Tokens += one.Tokens
		r.Handovers += one.Handovers
		r.InFlight += one.InFlight
		r.Asserted += one.Asserted
		for _, v := range one.Violations {
			if d != "" {
				v.Detail = "domain " + d + ": " + v.Detail
			}
			r.Violations = append(r.Violations, v)
		}
	}
	slices.SortStableFunc(r.Violations, func(a, b Violation) int { return cmp.Compare(a.Rule, b.Rule) })
	return r
}

// checkDomain verifies the admissions of one fence domain:
//
//  1. Each was decided by its own domain's fence while the engine held it:
//     status active, its own cluster named as holder, a token above 0, and
//     stamped with the token of that state.
//  2. A token belongs to one cluster.
//  3. No admission with a lower token began after an admission with a
//     higher token ended. Between two clusters this is exclusivity: once
//     the new holder has admitted, the old holder never admits again, so
//     their admitted intervals never overlap. Within one cluster it says
//     that tokens only grow along time.
//
// Rule 3 is stated on the observed [Start, End] of each Admit call, and it
// is exactly the condition under which every admission can be placed at one
// moment of its own interval so that all admissions of a token come before
// all admissions of higher tokens. Each Admit decides on the fence state it
// loads when it begins, so an Admit of the old holder that is still running
// when the new holder's first admission begins (its intervals overlap the
// new holder's) decided before the fence moved, and is allowed; an Admit of
// the old holder that began after an admission of the new holder ended
// certainly decided after it, and is a violation.
func checkDomain(admissions []Admission) Report {
	r := Report{Domains: 1, Admissions: len(admissions)}
	count := map[string]int{}
	add := func(rule, format string, args ...any) {
		if count[rule]++; count[rule] <= maxPerRule {
			r.Violations = append(r.Violations, Violation{Rule: rule, Detail: fmt.Sprintf(format, args...)})
		}
	}

	type group struct {
		cluster string
		// first is the admission that ended first, last the one that
		// began last.
		first, last Admission
		// begin and end span all of the group's admissions.
		begin, end time.Duration
	}
	groups := map[uint64]*group{}
	for _, a := range admissions {
		if a.Asserted != 0 {
			r.Asserted++
		}
		if a.Asserted != 0 && a.Asserted < a.FenceToken {
			add(RuleLateCommit, "%s was decided under token %d and admitted with the fence at token %d", a, a.Asserted, a.FenceToken)
		}
		switch {
		case a.FenceDomain != a.Domain:
			add(RuleOtherDomain, "%s of domain %q was decided by the fence of domain %q", a, a.Domain, a.FenceDomain)
		case a.Status != fencestate.Active || a.Holder != a.uid() || a.FenceToken == 0:
			add(RuleNotHolding, "%s was admitted with the fence state status %q, holder %q, token %d (its cluster is %q)",
				a, a.Status, a.Holder, a.FenceToken, a.Cluster)
		case a.Token != a.FenceToken:
			add(RuleStamp, "%s was stamped with token %d but decided with the fence token %d", a, a.Token, a.FenceToken)
		}
		g, ok := groups[a.Token]
		if !ok {
			groups[a.Token] = &group{cluster: a.Cluster, first: a, last: a, begin: a.Start, end: a.End}
			continue
		}
		if g.cluster != a.Cluster {
			add(RuleSharedToken, "token %d was admitted by two clusters: %s (cluster %s) and %s (cluster %s)", a.Token, g.first, g.cluster, a, a.Cluster)
			continue
		}
		if a.End < g.first.End {
			g.first = a
		}
		if a.Start > g.last.Start {
			g.last = a
		}
		g.begin, g.end = min(g.begin, a.Start), max(g.end, a.End)
	}

	tokens := slices.Sorted(maps.Keys(groups))
	r.Tokens = len(tokens)
	// latest holds, per cluster, the admission with a lower token than
	// the current one that began last.
	latest := map[string]Admission{}
	var prev *group
	for _, token := range tokens {
		g := groups[token]
		for _, cluster := range slices.Sorted(maps.Keys(latest)) {
			old := latest[cluster]
			if old.Start <= g.first.End {
				continue
			}
			if cluster == g.cluster {
				add(RuleTokenRegressed, "%s began after %s of the same cluster had ended: its token went back from %d to %d",
					old, g.first, g.first.Token, old.Token)
			} else {
				add(RuleOverlap, "%s began after %s had ended: cluster %s admitted with token %d after cluster %s took the fence over with token %d",
					old, g.first, cluster, old.Token, g.cluster, g.first.Token)
			}
		}
		if prev != nil && prev.cluster != g.cluster {
			r.Handovers++
			if prev.end > g.begin {
				r.InFlight++
			}
		}
		if l, ok := latest[g.cluster]; !ok || g.last.Start > l.Start {
			latest[g.cluster] = g.last
		}
		prev = g
	}
	slices.SortStableFunc(r.Violations, func(a, b Violation) int { return cmp.Compare(a.Rule, b.Rule) })
	return r
}
