package failover

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"

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
}

// MakePlan decides the epoch to raise the target's spec.epoch to: one above
// the holder's epoch as the target and the old holder (from; nil when
// unreachable or not named) know it, or epoch when it is not 0.
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

// clusterName is the name of the cluster whose Fence f is, as its status
// says; "the target" until fencegate wrote it.
func clusterName(f *fencegatev1alpha1.Fence) string {
	if f.Status.Cluster != nil && f.Status.Cluster.Name != "" {
		return f.Status.Cluster.Name
	}
	return "the target"
}
