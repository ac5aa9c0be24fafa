package failover

import (
	"errors"
	"fmt"
	"math"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// ErrAlreadyHolding is returned when the target holds the fence already and
// no epoch was asked for: there is nothing to fail over.
var ErrAlreadyHolding = errors.New("the target holds the fence already")

// Plan is the epoch a failover asks the target to declare.
type Plan struct {
	// Epoch is the epoch the target is to declare.
	Epoch uint64
	// Patch is false when the target declares that epoch (or more)
	// already: the failover only waits.
	Patch bool
	// Holder names the holder that the target takes the fence from, as
	// the clusters know it; HolderEpoch is its epoch.
	Holder      string
	HolderEpoch uint64
	// Highest is the highest epoch the Fences show the domain has seen:
	// the holder's, a pending takeover's, either cluster's own. The
	// authority measures Epoch's step from its own record of the highest
	// epoch, which is this one or above.
	Highest uint64
}

// StepError refuses a plan whose epoch is further above the highest epoch
// the Fences show than the fence authority's max epoch step: the authority
// would refuse the target's declaration (EPOCH_STEP_TOO_LARGE), record
// nothing, and the fence would not move.
type StepError struct {
	Plan    Plan
	MaxStep uint64
}

func (e *StepError) Error() string {
	p := e.Plan
	most := p.Highest + min(e.MaxStep, math.MaxUint64-p.Highest)
	enough := "leave --epoch out to ask for one above the holder's"
	if p.HolderEpoch != 0 {
		enough = fmt.Sprintf("%d, one above the holder's, is enough: leave --epoch out to ask for it", p.HolderEpoch+1)
	}
	return fmt.Sprintf("epoch %d is %d above epoch %d, the highest epoch the Fences show, more than the fence authority's max epoch step %d: "+
		"the authority would refuse it (EPOCH_STEP_TOO_LARGE) and the fence would not move; nothing was changed. "+
		"Ask for an epoch of at most %d (%s), or pass the authority's own --max-epoch-step if it runs with a larger one",
		p.Epoch, p.Epoch-p.Highest, p.Highest, e.MaxStep, most, enough)
}

// CheckStep returns a *StepError when p.Epoch is more than maxStep (the
// authority's --max-epoch-step) above p.Highest. A plan that knows no epoch
// at all (Highest 0: no status written yet) is not checked: the authority
// may know a higher one.
func (p Plan) CheckStep(maxStep uint64) error {
	if p.Highest == 0 || p.Epoch <= p.Highest || p.Epoch-p.Highest <= maxStep {
		return nil
	}
	return &StepError{Plan: p, MaxStep: maxStep}
}

// MakePlan decides the epoch to raise the target's spec.epoch to: one above
// the holder's epoch as the target and the old holder (from; nil when
// unreachable or not named) know it, or epoch when it is not 0. For a
// target restored from a backup (CLUSTER_RESTORED), the holder may be the
// cluster it is a copy of, at the epoch the target declares.
func MakePlan(target, from *fencegatev1alpha1.Fence, epoch uint64) (Plan, error) {
	self := clusterName(target)
	if meta.IsStatusConditionTrue(target.Status.Conditions, fencegatev1alpha1.ConditionHolding) && epoch == 0 {
		return Plan{}, fmt.Errorf("%w: %s holds the fence of domain %q at epoch %d (pass --epoch to raise its epoch anyway)", ErrAlreadyHolding, self, target.Name, target.Status.Epoch)
	}
	var p Plan
	consider := func(name string, e int64) {
		if name != "" && name != self && e > 0 && uint64(e) >= p.HolderEpoch {
			p.Holder, p.HolderEpoch = name, uint64(e)
		}
	}
	if h := target.Status.Holder; h != nil {
		consider(h.Name, h.Epoch)
	}
	if pending := target.Status.Pending; pending != nil {
		// A takeover by a third cluster: the fence goes to whoever
		// declares the highest epoch.
		consider(pending.Name, pending.Epoch)
	}
	if from != nil {
		if meta.IsStatusConditionTrue(from.Status.Conditions, fencegatev1alpha1.ConditionHolding) {
			consider(clusterName(from), from.Status.Epoch)
		}
		if h := from.Status.Holder; h != nil {
			consider(h.Name, h.Epoch)
		}
	}
	if e := recordedEpoch(target); target.Status.FenceReason == rpctypes.ReasonClusterRestored && e >= p.HolderEpoch {
		// A copy restored from a backup of its cluster is refused only at
		// the highest epoch its cluster declared, which it declares: the
		// cluster it was restored from, which has its name, may hold the
		// fence at that epoch.
		p.Holder, p.HolderEpoch = self, e
	}
	p.Highest = max(p.HolderEpoch, recordedEpoch(target), recordedEpoch(from))
	switch {
	case epoch != 0 && p.HolderEpoch != 0 && epoch <= p.HolderEpoch:
		return Plan{}, fmt.Errorf("--epoch %d is not above the epoch %d of the holder %s: the fence would not move; ask for %d or more", epoch, p.HolderEpoch, p.Holder, p.HolderEpoch+1)
	case epoch != 0:
		p.Epoch = epoch
	case p.HolderEpoch == 0:
		return Plan{}, fmt.Errorf("the holder's epoch is not known: %s says %s; pass --epoch with an epoch above the holder's (fencegate fence status shows it)", self, describeStatus(target))
	default:
		p.Epoch = p.HolderEpoch + 1
	}
	p.Patch = target.Status.Epoch < int64(p.Epoch) //nolint:gosec // epochs are far below 2^63
	return p, nil
}

// recordedEpoch is the epoch f's cluster declares, which the authority
// recorded; 0 for no Fence, or when the authority refused that epoch as
// too large a step, which records nothing.
func recordedEpoch(f *fencegatev1alpha1.Fence) uint64 {
	if f == nil || f.Status.FenceReason == rpctypes.ReasonEpochStepTooLarge || f.Status.Epoch < 0 {
		return 0
	}
	return uint64(f.Status.Epoch)
}

// clusterName is the name of the cluster whose Fence f is, as its status
// says; "the target" until fencegate wrote it.
func clusterName(f *fencegatev1alpha1.Fence) string {
	if f.Status.Cluster != nil && f.Status.Cluster.Name != "" {
		return f.Status.Cluster.Name
	}
	return "the target"
}
