package statemachine

// EventType is a change of a domain's fence that watchers hear about.
type EventType int

const (
	// HolderChanged means the fence changed hands, or was granted for the first
	// time.
	HolderChanged EventType = iota + 1
	// HolderReleased means the holder became free by releases: an instance
	// released its lease, and every other instance had released its own
	// or its lease had ended.
	HolderReleased
	// PendingChanged means a takeover became pending, or a pending takeover
	// changed or ended.
	PendingChanged
	// HolderRevoked means an operator revoked leases of the holder.
	HolderRevoked
)

var eventTypeNames = map[EventType]string{
	HolderChanged: "holder_changed", HolderReleased: "released", PendingChanged: "pending_changed", HolderRevoked: "revoked",
}

func (t EventType) String() string { return eventTypeNames[t] }

// Changes lists what changed from old to next, most significant first:
// a new holder, then a release or a revocation, then the pending takeover.
// Lease renewals, a holder's rising epoch and cluster records are not
// changes.
func Changes(old, next State) []EventType {
	var out []EventType
	switch {
	case holderChanged(old.Holder, next.Holder):
		out = append(out, HolderChanged)
	case next.Holder != nil && next.Holder.Released && !old.Holder.Released:
		out = append(out, HolderReleased)
	case next.Holder.revokedCount() > old.Holder.revokedCount():
		out = append(out, HolderRevoked)
	}
	if pendingChanged(old.Pending, next.Pending) {
		out = append(out, PendingChanged)
	}
	return out
}

// holderChanged compares holders by identity and token: a grant the store
// has not committed yet carries token 0, which no stored grant has, so a
// fence handed back to an earlier holder is a change too.
func holderChanged(a, b *Holder) bool {
	if a == nil || b == nil {
		return a != b
	}
	return a.Identity != b.Identity || a.Token != b.Token
}

func pendingChanged(a, b *Pending) bool {
	if a == nil || b == nil {
		return a != b
	}
	return a.Identity != b.Identity || a.Epoch != b.Epoch
}
