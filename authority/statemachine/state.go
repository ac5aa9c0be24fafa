package statemachine

import (
	"maps"
	"reflect"
	"slices"
	"time"
)

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
	// LeaseSeq numbers the leases the machine wrote in the domain: each
	// grant or renewal gets the next number, so that every replica of the
	// authority can tell a lease it has seen from a renewal of it without
	// comparing times written by another replica's clock.
	LeaseSeq uint64 `json:"lease_seq,omitempty"`
	// LastGeneration is the last cluster generation the machine issued in
	// the domain. Each new one is above it, so that a cluster's
	// generations only rise, even across a forgotten record made anew by a
	// replica whose clock is behind the one that issued the old record's:
	// the cluster's processes, which keep the newest generation they saw,
	// would otherwise present the old record's and be refused as restored.
	LastGeneration uint64 `json:"last_generation,omitempty"`
}

// HighestEpoch is the highest epoch any cluster declared in the domain; 0
// before the first declaration.
func (s State) HighestEpoch() uint64 {
	var highest uint64
	for _, c := range s.Clusters {
		highest = max(highest, c.HighestEpoch)
	}
	return highest
}

// Holder is the cluster that holds the fence.
//
// A cluster runs several processes that declare (the replicas of its
// fencegate, and the old and new pods of a rollout), each of which acts as
// holder on its own answers. So each one, an instance, has its own lease:
// the fence may move to another cluster only once no instance can still
// believe it is active, because each one released or its lease ended.
type Holder struct {
	// Identity names the cluster; a declaration comes from the holder only
	// when both its name and UID match.
	Identity
	// Epoch is the epoch of the holder's last accepted declaration.
	Epoch uint64 `json:"epoch"`
	// AcquiredAt is when the fence was granted to this holder.
	AcquiredAt UnixNano `json:"acquired_at_ns"`
	// Grant is how the fence was granted to this holder, at AcquiredAt:
	// after the previous holder released it or after a lease of the
	// previous holder expired. The new holder reads it from every answer,
	// so that after an expiry, when an instance of the previous holder cut
	// off from the authority may have acted until its lease ran out by its
	// own clock, it can wait before it lets its own actuators act.
	// Renewals keep it. Empty for a holder stored before it was recorded:
	// its kind is unknown, and reads as such.
	Grant GrantKind `json:"grant,omitempty"`
	// Instances are the leases of the holder's instances, by instance
	// name. The machine keeps at least one: an instance is dropped only
	// once its lease ended, when another one declares or releases.
	Instances map[string]Lease `json:"instances,omitempty"`
	// LeaseExpiresAt sums the instances up: the latest end of a lease
	// among the instances that have not released (among all instances
	// once every one released), by the authority's clock. The machine
	// keeps it in step with Instances; it is stored so that the record
	// reads the same for tools and versions that know one lease only.
	LeaseExpiresAt UnixNano `json:"lease_expires_at_ns"`
	// Released sums the instances up: every instance gave the fence up.
	Released bool `json:"released,omitempty"`
	// Revoked is set while an operator's revocation covers the whole
	// cluster: no instance of it may renew or join at an epoch up to
	// RevokedEpoch. Declaring a higher epoch (an operator raised it on
	// purpose) lifts it.
	Revoked bool `json:"revoked,omitempty"`
	// RevokedEpoch is the holder's epoch when it was revoked.
	RevokedEpoch uint64 `json:"revoked_epoch,omitempty"`
	// RevokedBy names the identity that revoked the whole cluster.
	RevokedBy string `json:"revoked_by,omitempty"`
	// RevokedInstances are the instances whose revoked lease ended, by
	// name: a revocation outlives its lease, so that a revoked process
	// cannot come back under its name at the epoch it was revoked at while
	// its cluster holds the fence. The machine keeps at most
	// MaxInstances of them, dropping the oldest first.
	RevokedInstances map[string]RevokedInstance `json:"revoked_instances,omitempty"`
	// Token is the fencing token of this grant. The store assigns it when
	// it commits the grant (the etcd revision of that commit) and keeps it
	// outside the record, so a state returned by the machine carries 0 for
	// a grant that is not stored yet.
	Token uint64 `json:"-"`
}

// RevokedInstance is what the machine keeps of a revoked instance once its
// lease ended.
type RevokedInstance struct {
	// Epoch is the epoch the lease was revoked at: the instance may not
	// declare at it or below.
	Epoch uint64 `json:"epoch"`
	// EndedAt is when its lease ended, by the clock of the authority
	// replica that saw it end.
	EndedAt UnixNano `json:"ended_at_ns"`
	// RevokedBy names the identity that revoked the lease.
	RevokedBy string `json:"revoked_by,omitempty"`
}

// Lease is the lease of one instance of the holder.
//
// Its end is judged by each replica of the authority on that replica's own
// monotonic clock: from when the replica first saw this lease (Seq), TTL
// later. The store tells the machine that end in LocalEnd before each step.
// ExpiresAt, written by the wall clock of the replica that granted or
// renewed the lease, is what people and tools read; no replica compares
// another replica's wall clock with its own.
type Lease struct {
	// Epoch is the epoch of the instance's last accepted declaration.
	Epoch uint64 `json:"epoch"`
	// ExpiresAt is when the lease ends unless the instance renews it, by
	// the wall clock of the replica that wrote it.
	ExpiresAt UnixNano `json:"lease_expires_at_ns"`
	// Seq is the lease's number in its domain (State.LeaseSeq); 0 for a
	// lease written before leases were numbered.
	Seq uint64 `json:"seq,omitempty"`
	// TTL is the length the lease was granted for; 0 for a lease written
	// before it was recorded.
	TTL time.Duration `json:"ttl_ns,omitempty"`
	// DeclarationID is the ID of the declaration that got the lease: the
	// instance counts the lease from that declaration's send, and may ask
	// for the lease to be kept by it. 0 when the declaration named none.
	DeclarationID uint64 `json:"declaration_id,omitempty"`
	// LocalEnd is when this replica of the authority judges that the lease
	// ends, on the time scale of the step's now; the store sets it before
	// each step and never stores it. 0 means ExpiresAt.
	LocalEnd UnixNano `json:"-"`
	// Released is set once the instance gave its lease up; its next
	// declaration clears it unless a takeover is pending.
	Released bool `json:"released,omitempty"`
	// Revoked is set once an operator revoked the lease: the instance can
	// no longer renew it at its epoch or below (a higher epoch is an
	// operator's new decision), but it lasts until ExpiresAt unless the
	// instance itself releases it, so that an instance cut off from the
	// authority, which cannot hear of the revocation, stops acting as
	// holder by its own clock before the fence can move.
	Revoked bool `json:"revoked,omitempty"`
	// RevokedBy names the identity that revoked the lease.
	RevokedBy string `json:"revoked_by,omitempty"`
}

// End is when the lease ends by this replica's judgement: LocalEnd once the
// store set it, else ExpiresAt.
func (l Lease) End() UnixNano {
	if l.LocalEnd != 0 {
		return l.LocalEnd
	}
	return l.ExpiresAt
}

// ended reports whether the lease can no longer make its instance act as
// holder at time at: it was released, or it ran out.
func (l Lease) ended(at UnixNano) bool { return l.Released || at >= l.End() }

// Free reports whether no instance of the holder may still believe it is
// active at time at: each one released its lease or the lease ran out.
// Only then may the fence move to another cluster.
func (h *Holder) Free(at UnixNano) bool {
	for _, l := range h.Instances {
		if !l.ended(at) {
			return false
		}
	}
	return true
}

// running counts the instances whose lease has not ended by time at,
// released or not: those a renewal at would keep.
func (h *Holder) running(at UnixNano) int {
	n := 0
	for _, l := range h.Instances {
		if at < l.End() {
			n++
		}
	}
	return n
}

// lastLeaseEnd is when the last lease that is neither released nor over at
// time at ends; at itself when the holder is free.
func (h *Holder) lastLeaseEnd(at UnixNano) UnixNano {
	last := at
	for _, l := range h.Instances {
		if !l.ended(at) {
			last = max(last, l.End())
		}
	}
	return last
}

// prune drops the instances whose lease ran out by time at, released or
// not: they cannot act as holder any more, and every start of a process is
// a new instance, so the record would otherwise grow with every restart.
// A revoked instance moves to RevokedInstances, so that a revoked process
// cannot come back under its name while its cluster holds the fence; that
// set is bounded too. It returns the history of the leases that ran out
// without being released.
func (h *Holder) prune(at UnixNano) []HistoryEntry {
	var expired []HistoryEntry
	for _, name := range slices.Sorted(maps.Keys(h.Instances)) {
		l := h.Instances[name]
		if at < l.End() {
			continue
		}
		delete(h.Instances, name)
		if l.Revoked {
			h.rememberRevoked(name, RevokedInstance{Epoch: l.Epoch, EndedAt: at, RevokedBy: l.RevokedBy})
		}
		if !l.Released {
			expired = append(expired, h.leaseExpired(name, l))
		}
	}
	return expired
}

// rememberRevoked adds a revoked instance whose lease ended, dropping the
// one that ended first once MaxInstances are kept: a forgotten revocation
// costs only liveness (that process may renew again, at its old epoch, as
// an instance of the cluster that holds the fence anyway), while an
// unbounded set would grow every transaction of the domain.
func (h *Holder) rememberRevoked(name string, r RevokedInstance) {
	if h.RevokedInstances == nil {
		h.RevokedInstances = map[string]RevokedInstance{}
	}
	h.RevokedInstances[name] = r
	for len(h.RevokedInstances) > MaxInstances {
		oldest := ""
		for _, n := range slices.Sorted(maps.Keys(h.RevokedInstances)) {
			if oldest == "" || h.RevokedInstances[n].EndedAt < h.RevokedInstances[oldest].EndedAt {
				oldest = n
			}
		}
		delete(h.RevokedInstances, oldest)
	}
}

// instanceRevoked reports whether an operator's revocation still bars
// instance from declaring epoch: its own lease's, one that outlived its
// lease, or the whole cluster's.
func (h *Holder) instanceRevoked(instance string, epoch uint64) bool {
	if l, ok := h.Instances[instance]; ok && l.Revoked && epoch <= l.Epoch {
		return true
	}
	if r, ok := h.RevokedInstances[instance]; ok && epoch <= r.Epoch {
		return true
	}
	return h.Revoked && epoch <= h.RevokedEpoch
}

// leaseExpired is the history entry of an instance's lease that ran out
// without a release.
func (h *Holder) leaseExpired(instance string, l Lease) HistoryEntry {
	return HistoryEntry{Kind: HistoryLeaseExpired, At: l.ExpiresAt, Cluster: h.Identity, Epoch: l.Epoch, Instance: instance}
}

// revokedCount counts the revoked leases and the cluster-wide revocation,
// so that a revocation is a change watchers hear about.
func (h *Holder) revokedCount() int {
	if h == nil {
		return 0
	}
	n := len(h.RevokedInstances)
	if h.Revoked {
		n++
	}
	for _, l := range h.Instances {
		if l.Revoked {
			n++
		}
	}
	return n
}

// summarize sets LeaseExpiresAt and Released from the instances.
func (h *Holder) summarize() {
	var latest, latestUnreleased UnixNano
	released := true
	for _, l := range h.Instances {
		latest = max(latest, l.ExpiresAt)
		if !l.Released {
			released = false
			latestUnreleased = max(latestUnreleased, l.ExpiresAt)
		}
	}
	h.Released = released
	h.LeaseExpiresAt = latestUnreleased
	if released {
		h.LeaseExpiresAt = latest
	}
}

// ref names the holder in the history.
func (h *Holder) ref() *HolderRef {
	return &HolderRef{Identity: h.Identity, Epoch: h.Epoch, Token: h.Token}
}

// Upgrade gives a holder stored before instances had leases of their own
// (no Instances) its one lease as the lease of instance "": the instance
// of clients that do not name one, as every client before did.
func (h *Holder) Upgrade() {
	if h == nil || len(h.Instances) > 0 {
		return
	}
	h.Instances = map[string]Lease{"": {Epoch: h.Epoch, ExpiresAt: h.LeaseExpiresAt, Released: h.Released}}
}

// Pending is a cluster waiting to take the fence over.
type Pending struct {
	// Identity names the cluster taking over.
	Identity
	// Epoch is the epoch it declared.
	Epoch uint64 `json:"epoch"`
	// RequestedAt is when it first asked for the takeover.
	RequestedAt UnixNano `json:"requested_at_ns"`
	// Copy marks a takeover by a copy of the holder itself: a cluster
	// restored from a backup of the holder, which has its name and UID,
	// declaring a raised epoch with a stale generation. The holder's
	// instances may be the other copy's, so the copy waits for all their
	// leases to end before it holds the fence.
	Copy bool `json:"copy,omitempty"`
}

// Cluster is what the authority remembers of a cluster that declared.
type Cluster struct {
	// Name is the name the cluster's UID is bound to: the one it first
	// declared. A declaration of the UID under another name is refused,
	// so that one cluster cannot rename, and so take over, the record of
	// another; renaming a cluster is forgetting it first.
	Name string `json:"name"`
	// HighestEpoch is the highest epoch it ever declared; declaring below it
	// is refused as a regression.
	HighestEpoch uint64 `json:"highest_epoch"`
	// LastEpoch is the epoch of its last declaration.
	LastEpoch uint64 `json:"last_epoch"`
	// LastDeclaredAt is when it declared last.
	LastDeclaredAt UnixNano `json:"last_declared_at_ns"`
	// Generation is the cluster's current generation: a number the
	// authority moves on when the cluster is granted the fence and every
	// Machine.GenerationPeriod while it declares, and that the cluster's
	// processes present. A copy of the cluster restored from an older
	// backup presents an older one. 0 until the first declaration.
	Generation uint64 `json:"generation,omitempty"`
	// PreviousGeneration is the generation before Generation: still
	// accepted, since processes learn a new one only from their next
	// answer or from the Fence status their peers write.
	PreviousGeneration uint64 `json:"previous_generation,omitempty"`
	// GenerationAt is when Generation was issued.
	GenerationAt UnixNano `json:"generation_at_ns,omitempty"`
	// PresentsGeneration is set once a process of the cluster presented
	// a generation: from then on, every process must. Until then the
	// cluster runs clients that know no generations (an older agent, a
	// tool), which must go on working when the authority is upgraded first.
	PresentsGeneration bool `json:"presents_generation,omitempty"`
}

// acceptsGeneration reports whether a process presenting g is a current
// process of the cluster: it presents the current or the previous
// generation, or it presents none while the cluster's processes do not
// present generations, or while the cluster has had one generation only
// (every process of a cluster that just started declaring).
func (c Cluster) acceptsGeneration(g uint64) bool {
	switch {
	case c.Generation == 0:
		return true
	case g == 0:
		return !c.PresentsGeneration || c.PreviousGeneration == 0
	default:
		return g == c.Generation || g == c.PreviousGeneration
	}
}

// presentsCurrent reports whether a process presenting g knows the
// cluster's current generation: it presents it, or it presents none while
// the cluster's processes present none (clients that know no generations).
func (c Cluster) presentsCurrent(g uint64) bool {
	if g == 0 {
		return !c.PresentsGeneration
	}
	return g == c.Generation
}

// rotateGeneration issues a new generation at time at: the time itself,
// so that generations never repeat, not even after the record is
// forgotten and made anew, or one above the last the domain issued
// (*last) if the clock is behind it.
func (c *Cluster) rotateGeneration(at UnixNano, last *uint64) {
	next := max(uint64(max(at, 0)), c.Generation+1, *last+1)
	c.PreviousGeneration, c.Generation, c.GenerationAt = c.Generation, next, at
	*last = next
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
	out := State{LeaseSeq: s.LeaseSeq, LastGeneration: s.LastGeneration}
	if s.Holder != nil {
		h := *s.Holder
		h.Instances = maps.Clone(h.Instances)
		h.RevokedInstances = maps.Clone(h.RevokedInstances)
		out.Holder = &h
	}
	if s.Pending != nil {
		p := *s.Pending
		out.Pending = &p
	}
	out.Clusters = maps.Clone(s.Clusters)
	return out
}

// Equal reports whether s and o are the same state. The authority asks it
// of every declaration (did it change anything to store?), so the records
// are compared as values, without reflection: maps.Equal needs them
// comparable, which a field that == cannot compare would break at
// compile time. The holder, whose instances are maps, is compared
// through reflect.DeepEqual.
func (s State) Equal(o State) bool {
	return s.LeaseSeq == o.LeaseSeq && s.LastGeneration == o.LastGeneration &&
		(s.Pending == nil) == (o.Pending == nil) && (s.Pending == nil || *s.Pending == *o.Pending) &&
		maps.Equal(s.Clusters, o.Clusters) && reflect.DeepEqual(s.Holder, o.Holder)
}
