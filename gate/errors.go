package gate

import (
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// ErrFenced is what a gated write returns, wrapped in a *FencedError, while
// this cluster does not hold the fence of the object's domain, and what
// the work decided under a hold is cancelled with when the hold changes or
// ends: errors.Is(err, ErrFenced) recognizes both.
var ErrFenced = errors.New("this cluster does not hold the fence")

// FencedError says which domain's fence stopped a write, and why.
type FencedError struct {
	// Hold is the domain's fence when the write was stopped.
	Hold Hold
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("gate: fence domain %s: %v: %s (%s)", e.Hold.Domain, ErrFenced, e.Hold.Message, e.Hold.Reason)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

func fencedError(h Hold) error {
	if h.Holding {
		// Held again, under another token: what was decided under the
		// old one is stale all the same.
		h.Holding, h.Reason = false, ReasonFenceChanged
		h.Message = fmt.Sprintf("the fence changed hands while this work ran (now token %d)", h.Token)
	}
	return &FencedError{Hold: h}
}

// ReasonFenceChanged is the reason of work cancelled because the fence
// changed hands while it ran, even back to this cluster.
const ReasonFenceChanged = "FenceChanged"

// StaleTokenReason is the status reason of a write that fencegate's webhook
// refused because it asserted an older fencing token than the fence's.
const StaleTokenReason = "STALE_FENCING_TOKEN"

// WriteTokenAnnotation is the request-only annotation in which a gated
// write asserts the fencing token its reconcile began under; fencegate's
// webhook checks it and removes it, so it is never stored.
const WriteTokenAnnotation = "fencegate.dev/write-token"

// IsStaleToken says whether err is fencegate's refusal of a write decided
// under an older fencing token than the fence's: the writer reads the
// object again and decides under the current hold.
func IsStaleToken(err error) bool {
	return string(apierrors.ReasonForError(err)) == StaleTokenReason
}
