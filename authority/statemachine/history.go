package statemachine

// HistoryKind says what a history entry records.
type HistoryKind string

// The kinds of history entries: every change of a fence, and every
// operator action on it.
const (
	// HistoryGranted: the fence was granted to Cluster at Epoch; Grant says
	// how, Previous names the holder before.
	HistoryGranted HistoryKind = "granted"
	// HistoryPending: a takeover by Cluster at Epoch became pending.
	HistoryPending HistoryKind = "pending"
	// HistoryPendingDropped: the pending takeover by Cluster ended without a
	// grant, because the holder raised its epoch to it or above.
	HistoryPendingDropped HistoryKind = "pending_dropped"
	// HistoryReleased: Instance of the holder Cluster released its lease.
	HistoryReleased HistoryKind = "released"
	// HistoryRevoked: an operator revoked the lease of Instance, or every
	// lease of Cluster (AllInstances).
	HistoryRevoked HistoryKind = "revoked"
	// HistoryForgotten: an operator made the authority forget Cluster, whose
	// highest epoch was Epoch.
	HistoryForgotten HistoryKind = "forgotten"
	// HistoryLeaseExpired: the lease of Instance of Cluster ran out at At
	// without renewal or release.
	HistoryLeaseExpired HistoryKind = "lease_expired"
)

// HistoryEntry is one recorded change of a fence. The store adds who made
// it and, for a grant, the token.
type HistoryEntry struct {
	// Kind says what happened.
	Kind HistoryKind `json:"kind"`
	// At is when it happened, by the authority's clock; for a lease that
	// ran out, when it ran out.
	At UnixNano `json:"at_ns"`
	// Cluster is the cluster it is about.
	Cluster Identity `json:"cluster"`
	// Epoch is the epoch involved.
	Epoch uint64 `json:"epoch,omitempty"`
	// Instance is the instance it is about.
	Instance string `json:"instance,omitempty"`
	// AllInstances is set when a revocation covers the whole cluster.
	AllInstances bool `json:"all_instances,omitempty"`
	// Grant says how a grant came about.
	Grant GrantKind `json:"grant,omitempty"`
	// Previous is the holder before a grant; nil for the first one.
	Previous *HolderRef `json:"previous,omitempty"`
}

// HolderRef names a holder in the history.
type HolderRef struct {
	Identity
	Epoch uint64 `json:"epoch"`
	Token uint64 `json:"token"`
}

// pendingHistory records how the pending takeover changed from old to next,
// unless a grant ended it (the grant's own entry says so).
func pendingHistory(old, next *Pending, at UnixNano, granted bool) []HistoryEntry {
	switch {
	case !pendingChanged(old, next):
		return nil
	case next != nil:
		return []HistoryEntry{{Kind: HistoryPending, At: at, Cluster: next.Identity, Epoch: next.Epoch}}
	case granted:
		return nil
	default:
		return []HistoryEntry{{Kind: HistoryPendingDropped, At: at, Cluster: old.Identity, Epoch: old.Epoch}}
	}
}
