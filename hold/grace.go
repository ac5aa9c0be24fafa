package hold

import (
	"time"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
)

// graceLeft is how long the takeover grace of state s still holds its
// domain's actuators at now: while this cluster is active and granted the
// fence after the previous holder's lease expired, that holder (cut off
// from the authority) is given until s.ResumeAtNS to hold its own. 0 when
// there is no grace or it has ended.
func graceLeft(s fencestate.State, now time.Time) time.Duration {
	if s.Status != fencestate.Active || s.ResumeAtNS == 0 {
		return 0
	}
	return max(time.Unix(0, s.ResumeAtNS).Sub(now), 0)
}

// duringGrace is decision d while grace is left: it holds, so that new
// objects are held as on a fenced cluster and nothing is released, and it
// is d as it is otherwise.
func duringGrace(d engine.HoldDecision, grace time.Duration) engine.HoldDecision {
	if grace > 0 {
		d.Hold = true
	}
	return d
}

// sooner is the shorter of two waits, 0 standing for none.
func sooner(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
