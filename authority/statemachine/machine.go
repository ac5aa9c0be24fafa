package statemachine

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// MaxInstances bounds the instances of the holder with a running lease: a
// cluster runs a few fencegate processes, and the bound keeps a client that
// declares under ever new names (a crash loop, a bug) from growing the
// stored record without end.
const MaxInstances = 64

// LimitError says that a request would grow the stored state past a bound;
// it may succeed later, once leases ended.
type LimitError struct {
	Problem string
}

func (e *LimitError) Error() string { return e.Problem }

// DefaultMaxEpochStep is how far above the highest epoch of a domain a
// declaration may go when the Machine sets no other step.
const DefaultMaxEpochStep = 1000

// EpochStepError refuses a declaration whose epoch is further above the
// highest epoch of its domain than the authority allows. Nothing of it is
// recorded: a typo or a hostile client must not raise the bar that every
// real cluster then has to clear.
type EpochStepError struct {
	// Declared is the refused epoch.
	Declared uint64
	// Highest is the highest epoch any cluster declared in the domain.
	Highest uint64
	// MaxStep is the largest step the authority accepts.
	MaxStep uint64
}

func (e *EpochStepError) Error() string {
	return fmt.Sprintf("epoch %d is more than %d above the highest epoch %d declared in the domain", e.Declared, e.MaxStep, e.Highest)
}

// BindingError refuses a declaration of a cluster UID under another name
// than the one the UID is bound to. Nothing of it is recorded.
type BindingError struct {
	// UID is the declared cluster UID.
	UID string
	// Declared is the name it was declared under.
	Declared string
	// Bound is the name the UID is bound to.
	Bound string
	// Domains are the domains whose records bind the UID to Bound, when
	// the declaration was refused in a domain that has no record of the
	// UID (see CheckBinding); nil when the declared domain's own record
	// binds it.
	Domains []string
}

func (e *BindingError) Error() string {
	where := ""
	if len(e.Domains) > 0 {
		where = fmt.Sprintf(" in domain %s", strings.Join(e.Domains, ", "))
	}
	return fmt.Sprintf("cluster uid %q is bound to cluster %q%s, not %q: a cluster cannot declare another cluster's UID; to rename a cluster, forget it first (fencegate fence forget --cluster %s --cluster-uid %s)",
		e.UID, e.Bound, where, e.Declared, e.Bound, e.UID)
}

// RestoredError refuses a declaration that presents a generation of its
// cluster that is neither the current nor the previous one, at an epoch
// no higher than the cluster ever declared: the process runs in a copy of
// the cluster restored from an older backup, or was cut off for longer
// than two generation periods while its peers went on. Nothing of it is
// recorded. Raising the cluster's epoch (a failover to it) or forgetting
// the cluster lets it declare again.
type RestoredError struct {
	// Cluster is the declaring cluster.
	Cluster Identity
	// Presented is the generation it presented.
	Presented uint64
	// Current is the cluster's current generation.
	Current uint64
	// HighestEpoch is the highest epoch the cluster declared.
	HighestEpoch uint64
}

func (e *RestoredError) Error() string {
	return fmt.Sprintf("cluster %q presents generation %d, but its current generation is %d: it looks restored from a backup; it may declare again once its epoch is raised above %d (fencegate failover --to %s) or it is forgotten",
		e.Cluster.Name, e.Presented, e.Current, e.HighestEpoch, e.Cluster.Name)
}

// MaxHistoryPerChange is the most history entries one step writes: a lease
// ended for each instance the holder can have, the grant that follows
// them and the change of the pending takeover. The history must keep at
// least that many, or one transaction would add entries and drop them.
const MaxHistoryPerChange = MaxInstances + 2

// DefaultGenerationPeriod is how often a declaring cluster's generation
// moves on when the Machine sets no other period.
const DefaultGenerationPeriod = time.Minute

// Outcome is how the authority answers a declaration.
type Outcome int

const (
	// Granted means the fence moved to the declaring cluster (cases 3 and 6); it
	// gets a new token.
	Granted Outcome = iota + 1
	// Renewed means the declaring instance's lease was renewed (case 4).
	Renewed
	// Fenced means another cluster holds the fence, or takes it over (cases 4
	// and 5).
	Fenced
	// Regressed means the cluster declared below an epoch it declared before
	// (case 2).
	Regressed
	// Acquiring means the takeover is recorded as pending until every
	// instance of the holder released or its lease ended (case 6).
	Acquiring
)

var outcomeNames = map[Outcome]string{
	Granted: "granted", Renewed: "renewed", Fenced: "fenced", Regressed: "epoch_regressed", Acquiring: "acquiring",
}

func (o Outcome) String() string { return outcomeNames[o] }

// GrantKind says how a grant came about.
type GrantKind string

const (
	// GrantFirst means nobody held the fence of the domain before.
	GrantFirst GrantKind = "first"
	// GrantAfterRelease means every instance of the previous holder had
	// released the fence.
	GrantAfterRelease GrantKind = "after_release"
	// GrantAfterExpiry means the lease of at least one instance of the
	// previous holder had ended without renewal or release (it is
	// unreachable, or stopped declaring).
	GrantAfterExpiry GrantKind = "after_expiry"
)

// FenceReason says why a declaration was fenced.
type FenceReason int

const (
	// HeldByOther means another cluster holds the fence at an epoch at or above
	// the declared one.
	HeldByOther FenceReason = iota + 1
	// TakeoverPending means the declaring cluster holds the fence, but a
	// takeover by a higher epoch is pending; the instance's lease is not
	// renewed (nor granted, to an instance that had none).
	TakeoverPending
	// OtherTakeoverPending means a third cluster's takeover at an epoch at or
	// above the declared one is pending.
	OtherTakeoverPending
	// LeaseRevoked means an operator revoked the declaring instance's lease,
	// or every lease of its cluster; it is not renewed (nor granted).
	LeaseRevoked
)

// Answer is the authority's reply to a declaration, before it is stored.
type Answer struct {
	// Outcome is the kind of reply.
	Outcome Outcome
	// Grant says how a Granted fence came about.
	Grant GrantKind
	// Previous is the holder before a grant (nil for the first one).
	Previous *Holder
	// FenceReason says why a Fenced declaration was refused.
	FenceReason FenceReason
	// RetryAfter is, for Acquiring, the time until the last lease of the
	// holder's instances that is not released ends.
	RetryAfter time.Duration
	// HighestEpoch is the highest epoch the cluster had declared before this
	// declaration; for Regressed it is the epoch it fell below.
	HighestEpoch uint64
	// ClusterGeneration is the declaring cluster's generation after the
	// declaration, for the instance to present next; 0 for Regressed.
	ClusterGeneration uint64
	// Lease is, for Granted and Renewed, the declaring instance's lease:
	// a new one, or the running one it asked to keep (see renewal).
	Lease Lease
}

// OK reports whether the declaring cluster holds the fence after the call.
func (a Answer) OK() bool { return a.Outcome == Granted || a.Outcome == Renewed }

// Result is the outcome of a declaration: the state to store, the answer,
// the changes watchers hear about and the entries of the fence's history.
type Result struct {
	State   State
	Answer  Answer
	Events  []EventType
	History []HistoryEntry
	// Changed reports whether State differs from the state declared in.
	// A declaration that changes nothing (a standby's, or a pending
	// takeover's, repeated) needs no write: its answer holds as long as
	// the stored state is still the one it was made from.
	Changed bool
}

// Machine applies the fence rules with the authority's settings.
type Machine struct {
	// LeaseTTL is how long the lease of a grant or renewal lasts.
	LeaseTTL time.Duration
	// MaxEpochStep is how far above the highest epoch of the domain a
	// declaration may go; 0 means DefaultMaxEpochStep.
	MaxEpochStep uint64
	// GenerationPeriod is how often a declaring cluster's generation
	// moves on; 0 means DefaultGenerationPeriod.
	GenerationPeriod time.Duration
	// DeclaredAtResolution is how far a cluster's LastDeclaredAt may lag
	// behind its declarations: a declaration that changes nothing else
	// moves it on only once it is this old, so that most declarations
	// of standbys change nothing and are answered without a write. 0
	// means DefaultDeclaredAtResolution; a negative one moves it on with
	// every declaration.
	DeclaredAtResolution time.Duration
}

// DefaultDeclaredAtResolution is how far a cluster's LastDeclaredAt may
// lag behind its declarations when the Machine sets no other resolution.
const DefaultDeclaredAtResolution = 10 * time.Second

// declaredAtResolution is the resolution in force.
func (m Machine) declaredAtResolution() time.Duration {
	if m.DeclaredAtResolution == 0 {
		return DefaultDeclaredAtResolution
	}
	return m.DeclaredAtResolution
}

// generationPeriod is the period in force.
func (m Machine) generationPeriod() time.Duration {
	if m.GenerationPeriod == 0 {
		return DefaultGenerationPeriod
	}
	return m.GenerationPeriod
}

// lease is a new lease for declaration d from time at, numbered in s.
func (m Machine) lease(s *State, d Declaration, at UnixNano) Lease {
	s.LeaseSeq++
	return Lease{Epoch: d.Epoch, ExpiresAt: at.Add(m.LeaseTTL), Seq: s.LeaseSeq, TTL: m.LeaseTTL, DeclarationID: d.ID}
}

// renewal is the lease a renewing declaration d of the holder h gets: the
// instance's running lease when d asks to keep it and may (it was got by
// the declaration d names, at d's epoch, and is neither released, revoked
// nor ended), else a new one. A kept lease is unchanged, so a heartbeat that keeps it writes
// nothing; it ends no later than the instance counts it to, from the send
// of the declaration that got it.
func (m Machine) renewal(s *State, h *Holder, d Declaration, at UnixNano) Lease {
	l, running := h.Instances[d.Instance]
	if d.KeepLeaseOf != 0 && running && l.DeclarationID == d.KeepLeaseOf && l.Epoch == d.Epoch && !l.Released && !l.Revoked && at < l.End() {
		return l
	}
	return m.lease(s, d, at)
}

// maxEpochStep is the step in force.
func (m Machine) maxEpochStep() uint64 {
	if m.MaxEpochStep == 0 {
		return DefaultMaxEpochStep
	}
	return m.MaxEpochStep
}

// Declare applies DeclareClusterEpoch(d) to s at the authority's time now.
// It never changes s. A bad request returns a *rpctypes.FieldError (case
// 1), an epoch too far above the domain's highest an *EpochStepError, a
// cluster UID declared under another name than the one it is bound to a
// *BindingError, a stale cluster generation a *RestoredError, and a
// new instance of the holder beyond MaxInstances a *LimitError; every other
// declaration, accepted or refused, records the cluster's epoch and the
// time it was seen, to DeclaredAtResolution. Leases are kept per instance
// of the holder: a renewal extends only the declaring instance's lease (or
// keeps it running as it is, when asked to: see renewal), and
// the fence moves to another cluster only once the holder is Free. A
// revoked lease, or every lease of a revoked cluster, is not renewed.
func (m Machine) Declare(s State, d Declaration, now time.Time) (Result, error) {
	if err := d.Validate(); err != nil {
		return Result{}, err
	}
	if highest, step := s.HighestEpoch(), m.maxEpochStep(); d.Epoch > highest && d.Epoch-highest > step {
		return Result{}, &EpochStepError{Declared: d.Epoch, Highest: highest, MaxStep: step}
	}
	at := At(now)
	var history []HistoryEntry
	next := s.Clone()
	next.Holder.Upgrade()
	if next.Clusters == nil {
		next.Clusters = map[string]Cluster{}
	}
	record, seen := next.Clusters[d.Cluster.UID]
	if seen && record.Name != d.Cluster.Name {
		return Result{}, &BindingError{UID: d.Cluster.UID, Declared: d.Cluster.Name, Bound: record.Name}
	}
	holder, pending := next.Holder, next.Pending
	// A copy of the holder that presents a stale generation at a raised
	// epoch (an operator fails over to a cluster restored from a backup)
	// takes the fence over from the holder's instances, which may be the
	// other copy's: it waits for their leases to end, as another cluster
	// would, instead of joining them. So does every declaration of the
	// cluster at that epoch or above until then (copyTakeover).
	copyTakeover := holder != nil && holder.Is(d.Cluster) &&
		(pending != nil && pending.Copy && pending.Is(d.Cluster) && d.Epoch >= pending.Epoch ||
			seen && d.Epoch > record.HighestEpoch && !record.acceptsGeneration(d.Generation))
	// A regression is answered as one (case 2) whatever the generation: an
	// epoch below the cluster's highest is never accepted anyway.
	if seen && d.Epoch == record.HighestEpoch && !record.acceptsGeneration(d.Generation) && !copyTakeover {
		return Result{}, &RestoredError{Cluster: d.Cluster, Presented: d.Generation, Current: record.Generation, HighestEpoch: record.HighestEpoch}
	}
	answer := Answer{HighestEpoch: record.HighestEpoch}
	record.Name = d.Cluster.Name
	record.LastEpoch = d.Epoch
	record.LastDeclaredAt = at
	record.HighestEpoch = max(record.HighestEpoch, d.Epoch)
	next.Clusters[d.Cluster.UID] = record

	switch {
	case seen && d.Epoch < answer.HighestEpoch: // case 2
		answer.Outcome = Regressed

	case holder == nil: // case 3
		answer.Outcome, answer.Grant = Granted, GrantFirst
		m.grant(&next, d, at, GrantFirst)

	case copyTakeover: // case 6, from a copy of the holder
		history = m.takeOver(&next, d, at, &answer, true)

	case holder.Is(d.Cluster): // case 4
		// A revocation holds for the epochs it was made at; a higher one
		// is an operator's new decision for this cluster.
		if holder.instanceRevoked(d.Instance, d.Epoch) {
			// Neither renewed nor granted: the revoked leases run out,
			// and the fence may then move.
			answer.Outcome, answer.FenceReason = Fenced, LeaseRevoked
			break
		}
		if pending != nil && pending.Epoch > d.Epoch {
			// Also for an instance without a lease (a new pod of the
			// holder): it must not extend the holder's ownership.
			answer.Outcome, answer.FenceReason = Fenced, TakeoverPending
			break
		}
		if _, known := holder.Instances[d.Instance]; !known && holder.running(at) >= MaxInstances {
			return Result{}, &LimitError{Problem: fmt.Sprintf(
				"cluster %q already has %d instances with a running lease, the most the authority keeps; instance %q is refused until one of them releases its lease or the lease ends",
				d.Cluster.Name, MaxInstances, d.Instance)}
		}
		answer.Outcome = Renewed
		holder.Epoch = d.Epoch
		if holder.Revoked {
			// A higher epoch than the revoked one: an operator's new
			// decision for this cluster.
			holder.Revoked, holder.RevokedEpoch, holder.RevokedBy = false, 0, ""
		}
		history = holder.prune(at)
		// Not revoked at this epoch: any revocation the instance
		// outlived was at a lower one.
		delete(holder.RevokedInstances, d.Instance)
		answer.Lease = m.renewal(&next, holder, d, at)
		holder.Instances[d.Instance] = answer.Lease
		holder.summarize()
		next.Pending = nil

	case d.Epoch <= holder.Epoch: // case 5, the holder's epoch
		answer.Outcome, answer.FenceReason = Fenced, HeldByOther

	case pending != nil && !pending.Is(d.Cluster) && pending.Epoch >= d.Epoch:
		// Case 5, a third cluster's takeover. An equal epoch does not
		// displace it either: the fence and its takeovers move only with a
		// strictly higher epoch, so two standbys at one epoch cannot take
		// the pending place from each other in turn.
		answer.Outcome, answer.FenceReason = Fenced, OtherTakeoverPending

	default: // case 6
		history = m.takeOver(&next, d, at, &answer, false)
	}
	granted := answer.Outcome == Granted
	if granted {
		answer.Lease = next.Holder.Instances[d.Instance]
	}
	if answer.Outcome != Regressed {
		// The generation moves on when the cluster is granted the fence,
		// which is when a backup of it starts to matter, and every period
		// while it declares, so that a backup is told apart within two
		// periods; it is never moved by a declaration that changes nothing.
		// Only a process that knows the current generation moves it on:
		// one whose last answer was lost still presents the previous one,
		// and moving on past it again would strand it, and every process
		// of the cluster whose answers were lost with it, as a restored copy.
		due := granted || at-record.GenerationAt >= UnixNano(m.generationPeriod())
		movesOn := record.Generation == 0 || due && record.presentsCurrent(d.Generation)
		if d.Generation != 0 && (d.Generation == record.Generation || d.Generation == record.PreviousGeneration) {
			record.PresentsGeneration = true
		}
		switch {
		case granted && copyTakeover:
			// The copy that takes the fence over is the cluster from
			// now on: its generations go on, the other copy's are told
			// apart. What it presented stays accepted until it hears of
			// the new one, so that a lost answer to its grant does not
			// strand it.
			record.rotateGeneration(at, &next.LastGeneration)
			record.PreviousGeneration = d.Generation
		case movesOn:
			record.rotateGeneration(at, &next.LastGeneration)
		}
		next.Clusters[d.Cluster.UID] = record
		answer.ClusterGeneration = record.Generation
	}
	if granted {
		entry := HistoryEntry{Kind: HistoryGranted, At: at, Cluster: d.Cluster, Epoch: d.Epoch, Instance: d.Instance, Grant: answer.Grant}
		if prev := answer.Previous; prev != nil {
			entry.Previous = prev.ref()
		}
		history = append(history, entry)
	}
	history = append(history, pendingHistory(s.Pending, next.Pending, at, granted)...)
	changed := m.keepDeclaredAt(s, &next, d.Cluster.UID, at)
	return Result{State: next, Answer: answer, Events: Changes(s, next), History: history, Changed: changed}, nil
}

// keepDeclaredAt leaves the LastDeclaredAt of the cluster uid in next as
// it is in s when that is less than the resolution old and nothing else
// of next differs from s. It reports whether next differs from s.
//
// A time that lies ahead of at (the authority's clock was stepped back)
// is moved back to at: the record follows the clock it is read by.
func (m Machine) keepDeclaredAt(s State, next *State, uid string, at UnixNano) bool {
	prev, seen := s.Clusters[uid]
	record, declared := next.Clusters[uid]
	if !seen || !declared {
		return true
	}
	if age := at - prev.LastDeclaredAt; age < 0 || age >= UnixNano(m.declaredAtResolution()) {
		return true
	}
	now := record.LastDeclaredAt
	record.LastDeclaredAt = prev.LastDeclaredAt
	next.Clusters[uid] = record
	if s.Equal(*next) {
		return false
	}
	record.LastDeclaredAt = now
	next.Clusters[uid] = record
	return true
}

// takeOver answers a declaration that takes the fence over from the
// holder (case 6): granted once no instance of the holder is active, else
// acquiring, with the takeover pending. byCopy marks a takeover by a copy of
// the holder. It returns the history of the holder's leases it ends.
func (m Machine) takeOver(next *State, d Declaration, at UnixNano, answer *Answer, byCopy bool) []HistoryEntry {
	holder, pending := next.Holder, next.Pending
	if !holder.Free(at) { // an instance of the holder may still believe it is active
		answer.Outcome = Acquiring
		answer.RetryAfter = time.Duration(holder.lastLeaseEnd(at) - at)
		requested := at
		if pending != nil && pending.Is(d.Cluster) {
			requested = pending.RequestedAt
		}
		next.Pending = &Pending{Identity: d.Cluster, Epoch: d.Epoch, RequestedAt: requested, Copy: byCopy}
		return nil
	}
	answer.Outcome, answer.Previous = Granted, holder
	answer.Grant = GrantAfterExpiry
	if holder.Released {
		answer.Grant = GrantAfterRelease
	}
	var history []HistoryEntry
	for _, name := range slices.Sorted(maps.Keys(holder.Instances)) {
		if l := holder.Instances[name]; !l.Released {
			history = append(history, holder.leaseExpired(name, l))
		}
	}
	m.grant(next, d, at, answer.Grant)
	return history
}

// grant makes the declaring cluster the holder, granted the way kind
// says, with a lease for the declaring instance. The token stays 0 until
// the store commits the grant.
func (m Machine) grant(s *State, d Declaration, at UnixNano, kind GrantKind) {
	s.Holder = &Holder{
		Identity:   d.Cluster,
		Epoch:      d.Epoch,
		AcquiredAt: at,
		Grant:      kind,
	}
	s.Holder.Instances = map[string]Lease{d.Instance: m.lease(s, d, at)}
	s.Holder.summarize()
	s.Pending = nil
}

// ReleaseOutcome is how the authority answers a release.
type ReleaseOutcome int

const (
	// Released means the instance gave its lease up now.
	Released ReleaseOutcome = iota + 1
	// AlreadyReleased means the instance had released its lease before;
	// nothing changes.
	AlreadyReleased
	// NotHolder means the releasing cluster does not hold the fence (or nobody
	// does).
	NotHolder
	// ReleaseRegressed means the releasing instance holds its lease at a
	// higher epoch than the release names.
	ReleaseRegressed
	// NoLease means the releasing instance of the holder has no lease: it
	// never declared, or its lease ended. Nothing changes, and the release
	// succeeds: what a release promises (this instance does not act as
	// holder) is already true, and a release retried after its answer was
	// lost must not fail once the instance's lease ran out.
	NoLease
)

var releaseOutcomeNames = map[ReleaseOutcome]string{
	Released: "released", AlreadyReleased: "already_released", NotHolder: "not_holder", ReleaseRegressed: "epoch_regressed", NoLease: "no_lease",
}

func (o ReleaseOutcome) String() string { return releaseOutcomeNames[o] }

// ReleaseResult is the outcome of a release.
type ReleaseResult struct {
	State   State
	Outcome ReleaseOutcome
	Events  []EventType
	History []HistoryEntry
}

// Release applies ReleaseFence(r) to s at the authority's time now. It never
// changes s. A bad request returns a *rpctypes.FieldError. Releasing marks the
// releasing instance's lease released and drops the instances whose lease
// ended; once every instance left has released, the holder is Released and
// a pending takeover is granted on its next declaration. The epoch is
// checked against the instance's own: an old pod of a rollout, at the epoch
// it declared, may release its lease after a new pod raised the holder's
// epoch. A release is not a declaration and records nothing about the
// cluster.
func (Machine) Release(s State, r Release, now time.Time) (ReleaseResult, error) {
	if err := r.Validate(); err != nil {
		return ReleaseResult{}, err
	}
	at := At(now)
	next := s.Clone()
	next.Holder.Upgrade()
	result := ReleaseResult{State: next}
	h := next.Holder
	var lease Lease
	var leased bool
	if h != nil {
		lease, leased = h.Instances[r.Instance]
	}
	switch {
	case h == nil || h.UID != r.ClusterUID || r.ClusterName != "" && h.Name != r.ClusterName:
		result.Outcome = NotHolder
	case !leased || at >= lease.End():
		result.Outcome = NoLease
	case r.Epoch < lease.Epoch:
		result.Outcome = ReleaseRegressed
	case lease.Released:
		result.Outcome = AlreadyReleased
	default:
		result.Outcome = Released
		lease.Released = true
		h.Instances[r.Instance] = lease
		result.History = append(h.prune(at), HistoryEntry{Kind: HistoryReleased, At: at, Cluster: h.Identity, Epoch: r.Epoch, Instance: r.Instance})
		h.summarize()
	}
	result.Events = Changes(s, next)
	return result, nil
}
