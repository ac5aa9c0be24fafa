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
