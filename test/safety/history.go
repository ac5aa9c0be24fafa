package safety

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"time"
)

// Event is something that happened in a history besides admissions: a step
// of the schedule, or a fence state that an agent wrote.
type Event struct {
	// At is when it happened, since the history began.
	At time.Duration
	// What says what happened.
	What string
}

// History is one run: its seed, what happened and what was admitted.
type History struct {
	// Seed generated the run's schedule.
	Seed uint64
	// Events are the schedule's steps and the agents' fence writes.
	Events []Event
	// Admissions are the admitted creates and updates.
	Admissions []Admission
	// Denied counts the creates and updates that were refused.
	Denied int
	// Stale counts the late commits (writes decided under an earlier
	// token) refused as stale.
	Stale int
	// KeptLeases counts the answers to holders that kept their running
	// lease instead of renewing it.
	KeptLeases int
	// Actions are the actuators' runs and the gated writes.
	Actions []Action
	// Calls are the agents' declarations and releases as their clients
	// saw them; Granted is, by token, the earliest end of a call answered
	// with it.
	Calls   []FenceCall
	Granted map[uint64]time.Duration
	// Grants are the grants of the history's domains in the authority's
	// own history (GetFenceHistory).
	Grants []Grant
	// Counts are what the actors and the nemeses of actions did.
	Counts Counts
}

// Counts are what the clusters' actors and the nemeses of actions did in
// a history.
type Counts struct {
	// Runs counts the actuators' runs; Writes the gated writes begun,
	// FencedWrites those the gate refused, CancelledWrites those cancelled
	// when their hold ended, RefusedWrites those the webhook refused.
	Runs, Writes, FencedWrites, CancelledWrites, RefusedWrites int64
	// HoldErrors counts the hold decisions that failed; ResumeWaits the
	// decisions that held an object only until the takeover grace ended.
	HoldErrors, ResumeWaits int64
	// HandoversAwaited counts the releases that waited until the
	// cluster's objects were held, HandoverTimeouts those that ran out of
	// lease first; WithdrawalsRefused the withdrawals a failing Lease
	// refused while its holder handed over (so that it did not release),
	// ShutdownWithdrawalsRefused those refused to a pod that stopped,
	// LeaseFailures the pods made to fail.
	HandoversAwaited, HandoverTimeouts, WithdrawalsRefused, ShutdownWithdrawalsRefused, LeaseFailures int64
	// BrokenReloads counts the engines told to reload a broken hold
	// policy, RefusedReloads those that refused it.
	BrokenReloads, RefusedReloads int64
	// Relabels counts the namespaces relabelled, AcrossHolders those
	// between domains of two holders; Failbacks the failovers and back.
	Relabels, AcrossHolders, Failbacks int64
	// CopyHeld is set when a restored copy was granted a fence.
	CopyHeld bool
}

// Write prints h in time order, compactly: each event on a line, and each
// run of admissions by one pod with one token on one line.
func (h History) Write(w io.Writer) {
	type line struct {
		at   time.Duration
		text string
	}
	lines := make([]line, 0, len(h.Events))
	for _, e := range h.Events {
		lines = append(lines, line{e.At, e.What})
	}
	byPod := slices.Clone(h.Admissions)
	slices.SortFunc(byPod, func(a, b Admission) int {
		return cmp.Or(cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Start, b.Start))
	})
	for i := 0; i < len(byPod); {
		j := i + 1
		for j < len(byPod) && byPod[j].Pod == byPod[i].Pod && byPod[j].Token == byPod[i].Token {
			j++
		}
		first, last := byPod[i], byPod[j-1]
		lines = append(lines, line{first.Start, fmt.Sprintf("%s admitted %d× with token %d, until %s", first.Pod, j-i, first.Token, seconds(last.End))})
		i = j
	}
	slices.SortStableFunc(lines, func(a, b line) int { return cmp.Compare(a.at, b.at) })
	_, _ = fmt.Fprintf(w, "history of seed %d (%d admitted, %d denied):\n", h.Seed, len(h.Admissions), h.Denied)
	for _, l := range lines {
		_, _ = fmt.Fprintf(w, "  %10s  %s\n", seconds(l.at), l.text)
	}
}

// seconds prints d as seconds to the microsecond: handovers happen within
// milliseconds, and so do the violations worth reading.
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.6fs", d.Seconds())
}
