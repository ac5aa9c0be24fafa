package fenceagent

import (
	"fmt"

	"github.com/fencegate/fencegate/fencestate"
)

// epochs are the epochs the loop declares. It declares the one it was asked
// for (Options.Epoch, then each SetEpoch) unless the authority refused that
// one as too far above the domain's highest (EPOCH_STEP_TOO_LARGE: nothing
// was recorded, so it was most likely a typo in the Fence's spec.epoch).
// Then, if the authority had accepted a lower epoch, the agent goes back to
// declaring and renewing that one, so that a holder keeps holding and a
// standby stays one, instead of going unknown until a restart. The refused
// epoch is asked for again only when SetEpoch names it again: at every
// heartbeat it would take the renewal's place. An agent that never had an
// epoch accepted has nothing to go back to: it goes on declaring the refused
// epoch, and takes a lower one from SetEpoch, since nothing was recorded at
// the refused one.
type epochs struct {
	// requested is the epoch asked for last.
	requested uint64
	// accepted is the highest epoch the authority accepted (see
	// answerKind.accepted); 0 before any.
	accepted uint64
	// refused is the authority's refusal of requested while the agent
	// declares accepted instead; nil otherwise.
	refused *fencestate.EpochRefusal
	// stepRefused is set while the authority refuses requested for its
	// step and no lower epoch was accepted to go back to (a process that
	// starts at a typo): the agent goes on declaring it.
	stepRefused bool
}

// declared is the epoch the agent declares now.
func (e epochs) declared() uint64 {
	if e.refused != nil {
		return e.accepted
	}
	return e.requested
}

// lowest is the lowest epoch that may be asked for: the one declared, but
// the accepted one (0: any) while the one asked for is refused for its step,
// since that one was never recorded and going below it is no regression.
func (e epochs) lowest() uint64 {
	if e.refused != nil || e.stepRefused {
		return e.accepted
	}
	return e.requested
}

// request makes epoch the one asked for, and reports whether it is to be
// declared at once: it is new, or it is the refused one asked for again. It
// may be below the one asked for before, down to lowest.
func (e *epochs) request(epoch uint64) (bool, error) {
	switch lowest := e.lowest(); {
	case epoch < lowest:
		return false, fmt.Errorf("epoch %d is below epoch %d that this agent declares: an epoch only rises (the authority refuses a lower one as a restored cluster)", epoch, lowest)
	case epoch == e.requested && e.refused == nil:
		return false, nil
	}
	e.requested, e.refused, e.stepRefused = epoch, nil, false
	return true, nil
}

// accept notes that the authority accepted a declaration of epoch.
func (e *epochs) accept(epoch uint64) {
	e.accepted = max(e.accepted, epoch)
	if epoch == e.requested {
		// A declaration of it that was out when another was refused:
		// the authority takes it now.
		e.refused, e.stepRefused = nil, false
	}
}

// refuseStep notes that the authority refused a declaration of epoch for
// its step, and reports whether the agent goes back to the accepted epoch
// (see revertible), with refusal as the state's EpochRefused. A refusal of
// an epoch no longer asked for changes nothing.
func (e *epochs) refuseStep(epoch uint64, refusal *fencestate.EpochRefusal) bool {
	switch {
	case e.revertible(epoch):
		e.refused = refusal
		return true
	case epoch == e.requested:
		e.stepRefused = true
	}
	return false
}

// revertible reports whether a step refusal of epoch sends the agent back to
// the accepted epoch: epoch is the one asked for, and a lower one was
// accepted. Otherwise it is an answer like any other: the refusal of the
// first epoch this agent declares leaves it unknown with the reason.
func (e epochs) revertible(epoch uint64) bool {
	return epoch == e.requested && e.accepted != 0 && e.accepted < epoch
}
