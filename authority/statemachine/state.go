package statemachine

import (
	"maps"
	"time"
)

// DefaultDomain is the domain of requests that name none.
const DefaultDomain = "default"

// UnixNano is a point in time in nanoseconds since the Unix epoch. Stored
// records keep times this way so they are exact, compact, free of time zones
// and of the monotonic readings that time.Time carries in memory.
type UnixNano int64

// At converts t.
func At(t time.Time) UnixNano { return UnixNano(t.UnixNano()) }

// Time converts u back; the zero UnixNano is the zero time.Time.
func (u UnixNano) Time() time.Time {
	if u == 0 {
		return time.Time{}
	}
	return time.Unix(0, int64(u)).UTC()
}

// Add returns u moved by d.
func (u UnixNano) Add(d time.Duration) UnixNano { return u + UnixNano(d) }

// State is everything the authority stores about one domain's fence.
type State struct {
	// Holder is the cluster that holds the fence; nil until the first grant.
	Holder *Holder `json:"holder,omitempty"`
	// Pending is a takeover by a higher epoch that waits for the holder's
	// lease to end or for the holder to release the fence.
	Pending *Pending `json:"pending,omitempty"`
	// Clusters holds every cluster that declared in the domain, by UID.
	Clusters map[string]Cluster `json:"clusters,omitempty"`
}

// Holder is the cluster that holds the fence.
type Holder struct {
	// Identity names the cluster; a declaration comes from the holder only
	// when both its name and UID match.
	Identity
	// Epoch is the epoch of the holder's last accepted declaration.
	Epoch uint64 `json:"epoch"`
	// AcquiredAt is when the fence was granted to this holder.
	AcquiredAt UnixNano `json:"acquired_at_ns"`
	// LeaseExpiresAt is when the lease ends unless it is renewed, by the
	// authority's clock.
	LeaseExpiresAt UnixNano `json:"lease_expires_at_ns"`
	// Released is set once the holder gave the fence up; its next
	// declaration clears it unless a takeover is pending.
	Released bool `json:"released,omitempty"`
	// Token is the fencing token of this grant. The store assigns it when
	// it commits the grant (the etcd revision of that commit) and keeps it
	// outside the record, so a state returned by the machine carries 0 for
	// a grant that is not stored yet.
	Token uint64 `json:"-"`
}

// Pending is a cluster waiting to take the fence over.
type Pending struct {
	// Identity names the cluster taking over.
	Identity
	// Epoch is the epoch it declared.
	Epoch uint64 `json:"epoch"`
	// RequestedAt is when it first asked for the takeover.
	RequestedAt UnixNano `json:"requested_at_ns"`
}

// Cluster is what the authority remembers of a cluster that declared.
type Cluster struct {
	// Name is the name it declared last.
	Name string `json:"name"`
	// HighestEpoch is the highest epoch it ever declared; declaring below it
	// is refused as a regression.
	HighestEpoch uint64 `json:"highest_epoch"`
	// LastEpoch is the epoch of its last declaration.
	LastEpoch uint64 `json:"last_epoch"`
	// LastDeclaredAt is when it declared last.
	LastDeclaredAt UnixNano `json:"last_declared_at_ns"`
}

// Identity names a cluster: its name (a DNS label) and the UID of its
// kube-system Namespace.
type Identity struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// Is reports whether c names the same cluster: both name and UID match.
func (i Identity) Is(c Identity) bool { return i == c }

// Clone returns a deep copy, so a caller may keep s while the machine
// builds the next state.
func (s State) Clone() State {
	out := State{}
	if s.Holder != nil {
		h := *s.Holder
		out.Holder = &h
	}
	if s.Pending != nil {
		p := *s.Pending
		out.Pending = &p
	}
	out.Clusters = maps.Clone(s.Clusters)
	return out
}
