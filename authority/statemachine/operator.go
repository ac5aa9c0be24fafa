package statemachine

import (
	"time"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
)

// Revocation is a RevokeFence request within one domain: an operator's
// action on the holder's leases.
type Revocation struct {
	// ClusterName names the holding cluster.
	ClusterName string
	// Instance is the one instance whose lease is revoked, unless
	// AllInstances is set.
	Instance string
	// AllInstances revokes every lease of the cluster, and keeps new
	// instances from joining until the cluster declares a higher epoch.
	AllInstances bool
	// By is the identity of the operator, kept with the revocation.
	By string
}

// Validate checks every field of r and returns a *rpctypes.FieldError for
// the first bad one.
func (r Revocation) Validate() error {
	var instance error
	if !r.AllInstances {
		instance = rpctypes.ValidateInstance(r.Instance)
	}
	return firstError(rpctypes.ValidateClusterName(r.ClusterName), instance)
}

// RevokeOutcome is how the authority answers a revocation.
type RevokeOutcome int

const (
	// Revoked means leases were revoked now.
	Revoked RevokeOutcome = iota + 1
	// AlreadyRevoked means everything the request names was revoked
	// before; nothing changes.
	AlreadyRevoked
	// RevokeNoLease means the named instance of the holder has no running
	// lease; nothing changes.
	RevokeNoLease
	// RevokeNotHolder means the named cluster does not hold the fence.
	RevokeNotHolder
)

var revokeOutcomeNames = map[RevokeOutcome]string{
	Revoked: "revoked", AlreadyRevoked: "already_revoked", RevokeNoLease: "no_lease", RevokeNotHolder: "not_holder",
}

func (o RevokeOutcome) String() string { return revokeOutcomeNames[o] }

// RevokeResult is the outcome of a revocation.
type RevokeResult struct {
	State   State
	Outcome RevokeOutcome
	Events  []EventType
	History []HistoryEntry
	// Until is when the last lease the request covers ends: the earliest
	// time another cluster can be granted the fence, unless each revoked
	// instance releases its own lease sooner.
	Until UnixNano
}

// Revoke applies RevokeFence(r) to s at the authority's time now. It never
// changes s. A bad request returns a *rpctypes.FieldError.
//
// A revocation never shortens a lease. The revoked instances are told
// CLUSTER_FENCED on their next declaration and stop acting as holder; one
// cut off from the authority cannot hear that, and stops only when its lease
// runs out by its own clock. So the holder becomes Free only once every
// revoked lease ran out or was released by its own instance, exactly as
// without the revocation: what it changes is that no lease is renewed.
func (Machine) Revoke(s State, r Revocation, now time.Time) (RevokeResult, error) {
	if err := r.Validate(); err != nil {
		return RevokeResult{}, err
	}
	at := At(now)
	next := s.Clone()
	next.Holder.Upgrade()
	result := RevokeResult{State: next}
	h := next.Holder
	if h == nil || h.Name != r.ClusterName {
		result.Outcome = RevokeNotHolder
		return result, nil
	}
	result.History = h.prune(at)
	changed := false
	for name, l := range h.Instances {
		if l.ended(at) || l.Revoked || !r.AllInstances && name != r.Instance {
			continue
		}
		l.Revoked, l.RevokedBy = true, r.By
		h.Instances[name] = l
		changed = true
	}
	if r.AllInstances && !h.Revoked {
		h.Revoked, h.RevokedEpoch, h.RevokedBy = true, h.Epoch, r.By
		changed = true
	}
	h.summarize()
	result.Until = h.lastLeaseEnd(at)
	switch l, leased := h.Instances[r.Instance]; {
	case changed:
		result.Outcome = Revoked
		result.History = append(result.History, HistoryEntry{
			Kind: HistoryRevoked, At: at, Cluster: h.Identity, Epoch: h.Epoch, Instance: r.Instance, AllInstances: r.AllInstances,
		})
	case r.AllInstances || leased && l.Revoked:
		result.Outcome = AlreadyRevoked
	default:
		result.Outcome = RevokeNoLease
	}
	if result.Outcome != Revoked && len(result.History) == 0 {
		// Nothing to store: answer from the state as it was.
		result.State = s
	}
	result.Events = Changes(s, result.State)
	return result, nil
}

// Forgetting is a ForgetCluster request within one domain.
type Forgetting struct {
	// Cluster names the cluster whose record is removed: both its name and
	// UID must match the record.
	Cluster Identity
}

// Validate checks every field of f and returns a *rpctypes.FieldError for
// the first bad one.
func (f Forgetting) Validate() error {
	return firstError(rpctypes.ValidateClusterName(f.Cluster.Name), rpctypes.ValidateClusterUID(f.Cluster.UID))
}

// ForgetOutcome is how the authority answers a ForgetCluster request.
type ForgetOutcome int

const (
	// Forgotten means the cluster's record was removed.
	Forgotten ForgetOutcome = iota + 1
	// ForgetInUse means the cluster holds the fence or is taking it over:
	// its epoch is what keeps the fence where it is.
	ForgetInUse
	// ForgetUnknown means no cluster with that UID declared in the domain,
	// or it declared under another name.
	ForgetUnknown
)

var forgetOutcomeNames = map[ForgetOutcome]string{Forgotten: "forgotten", ForgetInUse: "in_use", ForgetUnknown: "unknown"}

func (o ForgetOutcome) String() string { return forgetOutcomeNames[o] }

// ForgetResult is the outcome of a ForgetCluster request.
type ForgetResult struct {
	State   State
	Outcome ForgetOutcome
	// Record is what the authority remembered of the cluster, if any.
	Record  Cluster
	History []HistoryEntry
}

// Forget applies ForgetCluster(f) to s at the authority's time now. It
// never changes s. A bad request returns a *rpctypes.FieldError. Forgetting
// a cluster drops its highest epoch: it may then declare a lower one, and
// the epoch guard measures steps from the epochs of the clusters left.
func (Machine) Forget(s State, f Forgetting, now time.Time) (ForgetResult, error) {
	if err := f.Validate(); err != nil {
		return ForgetResult{}, err
	}
	record, seen := s.Clusters[f.Cluster.UID]
	result := ForgetResult{State: s, Record: record}
	switch {
	case !seen || record.Name != f.Cluster.Name:
		result.Outcome = ForgetUnknown
	case s.Holder != nil && s.Holder.UID == f.Cluster.UID, s.Pending != nil && s.Pending.UID == f.Cluster.UID:
		result.Outcome = ForgetInUse
	default:
		result.Outcome = Forgotten
		next := s.Clone()
		delete(next.Clusters, f.Cluster.UID)
		result.State = next
		result.History = []HistoryEntry{{Kind: HistoryForgotten, At: At(now), Cluster: f.Cluster, Epoch: record.HighestEpoch}}
	}
	return result, nil
}
