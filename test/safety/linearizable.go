package safety

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// CallKind is what a recorded call to the authority did.
type CallKind int

// The calls the linearizability check takes in.
const (
	// CallDeclare is a DeclareClusterEpoch.
	CallDeclare CallKind = iota + 1
	// CallRelease is a ReleaseFence.
	CallRelease
)

// Answer is how a recorded call ended, as its client saw it.
type Answer int

// The answers the model knows.
const (
	// AnswerLease: a declaration was answered with a lease written for it
	// (a grant, or a renewal as a new lease): Token names the holder's
	// token. A write: the authority answers it from the record it commits.
	AnswerLease Answer = iota + 1
	// AnswerUnknown: the call failed or timed out (unavailable, deadline
	// exceeded, cancelled): it may or may not have taken effect, at any
	// time after it began.
	AnswerUnknown
	// AnswerReleased: a release succeeded: the releasing cluster holds the
	// fence (or nobody does).
	AnswerReleased
	// AnswerReleaseFenced: a release was refused as CLUSTER_FENCED: another
	// cluster holds the fence.
	AnswerReleaseFenced
)

// FenceCall is one call of an agent to the authority as its client saw it:
// when it began and ended on the history's clock, what it asked and how it
// was answered. Answers that the design lets a replica make from its cached
// record (a kept lease, CLUSTER_FENCED or FENCE_ACQUIRING to a declaration)
// are not FenceCalls: docs/design.md says such an answer can be older than
// one another replica gave, so they are no linearizable reads.
type FenceCall struct {
	Kind   CallKind
	Domain string
	// UID and Epoch are the declaring or releasing cluster's.
	UID   string
	Epoch uint64
	// Start and End are when the call began and returned.
	Start, End time.Duration
	Answer     Answer
	// Token is the holder's token of an AnswerLease.
	Token uint64
}

func (c FenceCall) String() string {
	what := "declare"
	if c.Kind == CallRelease {
		what = "release"
	}
	switch c.Answer {
	case AnswerLease:
		return fmt.Sprintf("%s %s@%d → lease, token %d", what, c.UID, c.Epoch, c.Token)
	case AnswerUnknown:
		return fmt.Sprintf("%s %s@%d → unknown", what, c.UID, c.Epoch)
	case AnswerReleased:
		return fmt.Sprintf("%s %s@%d → released", what, c.UID, c.Epoch)
	default:
		return fmt.Sprintf("%s %s@%d → CLUSTER_FENCED", what, c.UID, c.Epoch)
	}
}

// fenceState is the model's state of one domain's fence: its holder (a
// cluster UID, "" before the first grant), the holder's epoch and token.
// token is 0 when a call that may have taken effect unseen granted the
// fence with a token nobody saw yet; floor is then the highest token known
// below it, which the unseen one is above.
type fenceState struct {
	holder string
	epoch  uint64
	token  uint64
	floor  uint64
}

// fenceModel is the sequential specification the recorded calls must be a
// linearization of, per domain (the domains are independent fences):
//
//   - A lease answered with the token in force names its holder; the
//     holder's epoch rises with its renewals.
//   - A lease with a higher token is a grant: tokens grow with every grant,
//     and a grant to another cluster needs a strictly higher epoch than
//     the holder's (the rule behind every case of the state machine). A
//     grant to the holder's own UID is a restored copy's takeover, at an
//     epoch no lower than the holder's.
//   - A lease with a lower token than one granted before never happens.
//   - A release succeeds for the holder only; another cluster's is
//     refused as CLUSTER_FENCED.
//   - A call of unknown outcome either changed nothing or, for a
//     declaration, renewed or granted with a token not seen (yet).
//
// Revocations and forgotten clusters move no holder and are not modelled.
var fenceModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byDomain := map[string][]porcupine.Operation{}
		var order []string
		for _, op := range history {
			d := op.Input.(FenceCall).Domain
			if _, ok := byDomain[d]; !ok {
				order = append(order, d)
			}
			byDomain[d] = append(byDomain[d], op)
		}
		out := make([][]porcupine.Operation, 0, len(order))
		for _, d := range order {
			out = append(out, byDomain[d])
		}
		return out
	},
	Init: func() []any { return []any{fenceState{}} },
	Step: func(state, input, _ any) []any {
		return fenceStep(state.(fenceState), input.(FenceCall))
	},
	DescribeOperation: func(input, _ any) string { return input.(FenceCall).String() },
	DescribeState: func(state any) string {
		s := state.(fenceState)
		return fmt.Sprintf("holder %q@%d, token %d (above %d)", s.holder, s.epoch, s.token, s.floor)
	},
}

// fenceStep is the states s may move to by call c; none when c's answer
// cannot follow s.
func fenceStep(s fenceState, c FenceCall) []any {
	known := max(s.token, s.floor)
	// grantable says whether the fence may move to c.UID at c.Epoch.
	grantable := s.holder == "" || (s.holder != c.UID && c.Epoch > s.epoch) || (s.holder == c.UID && c.Epoch >= s.epoch)
	switch c.Answer {
	case AnswerLease:
		switch {
		case s.token != 0 && c.Token == s.token:
			if s.holder != c.UID {
				return nil
			}
			s.epoch = max(s.epoch, c.Epoch)
			return []any{s}
		case s.token == 0 && s.holder == c.UID && c.Token > s.floor:
			// The grant nobody had seen: now its token is known.
			s.token, s.epoch = c.Token, max(s.epoch, c.Epoch)
			return []any{s}
		case c.Token > known && grantable:
			return []any{fenceState{holder: c.UID, epoch: c.Epoch, token: c.Token, floor: c.Token}}
		}
		return nil
	case AnswerReleased:
		if s.holder != "" && s.holder != c.UID {
			return nil
		}
		return []any{s}
	case AnswerReleaseFenced:
		if s.holder == c.UID {
			return nil
		}
		return []any{s}
	case AnswerUnknown:
		if c.Kind != CallDeclare {
			return []any{s}
		}
		out := []any{s}
		switch {
		case s.holder == c.UID && c.Epoch > s.epoch:
			// A renewal at a higher epoch, or a copy's takeover.
			renewed := s
			renewed.epoch = c.Epoch
			out = append(out, renewed, fenceState{holder: c.UID, epoch: c.Epoch, floor: known})
		case s.holder == c.UID && c.Epoch == s.epoch:
			out = append(out, fenceState{holder: c.UID, epoch: c.Epoch, floor: known})
		case grantable:
			out = append(out, fenceState{holder: c.UID, epoch: c.Epoch, floor: known})
		}
		return out
	}
	return nil
}

// RuleNotLinearizable is broken when the authority's answers, as the agents saw them,
// are no linearizable history of fenceModel.
const RuleNotLinearizable = "authority-not-linearizable"

// Linearizability is what CheckLinearizable found.
type Linearizability struct {
	// Calls is the number of calls checked, Unknown how many of them
	// ended without an answer.
	Calls, Unknown int
	// Result is porcupine's: Ok, Illegal, or Unknown when the check ran
	// out of time.
	Result porcupine.CheckResult
}

// CheckLinearizable checks that calls, the declarations and releases as
// their clients saw them, are a linearizable history of fenceModel, within
// timeout. A call of unknown outcome may take effect at any time after it
// began: it is given no end.
func CheckLinearizable(calls []FenceCall, timeout time.Duration) Linearizability {
	l := Linearizability{Calls: len(calls)}
	ops := make([]porcupine.Operation, 0, len(calls))
	for i, c := range calls {
		end := int64(c.End)
		if c.Answer == AnswerUnknown {
			l.Unknown++
			end = math.MaxInt64
		}
		ops = append(ops, porcupine.Operation{ClientId: i, Input: c, Call: int64(c.Start), Output: c.Answer, Return: end})
	}
	l.Result = porcupine.CheckOperationsTimeout(fenceModel.ToModel(), ops, timeout)
	return l
}
