package fenceagent

import (
	"fmt"
	"math"
	"time"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/fencestate"
)

// rules hold what the status decisions depend on besides the answer. The
// decisions are pure functions of them, the current state and the answer, so
// every rule of the mapping is tested without a network or a clock.
type rules struct {
	domain string
	// self is this cluster. Its epoch is the one the agent starts with;
	// an answer is decided by at(the epoch its declaration was sent at).
	self fencestate.Cluster
	// instance names this process within its cluster.
	instance string
	// margin is taken off every granted lease.
	margin time.Duration
	// grace is the takeover grace after a grant that followed an expiry.
	grace time.Duration
}

// at is r for the answer to a declaration of epoch: the state it leads to,
// and its message, name the epoch that declaration was sent at, not the
// one the agent declares when the answer arrives.
func (r rules) at(epoch uint64) rules {
	r.self.Epoch = epoch
	return r
}

// initial is the state before any answer: not holding.
func (r rules) initial() fencestate.State {
	return fencestate.State{
		Status:  fencestate.Unknown,
		Domain:  r.domain,
		Cluster: r.self,
		Reason:  fencestate.ReasonNoAnswerYet,
		Message: fmt.Sprintf("cluster %s has no answer from the fence authority yet; it does not act as holder until it has one", r.self.Describe()),
	}
}

// next returns the state that answer a to the declaration sent at sent leads
// to, and until when that state may be trusted without a newer answer (zero:
// until further notice). cur and curExpires are the present state and its
// expiry; stale is how long a refusal is trusted.
func (r rules) next(cur fencestate.State, curExpires time.Time, a answer, sent, now time.Time, stale time.Duration) (fencestate.State, time.Time) {
	s := fencestate.State{Domain: r.domain, Cluster: r.self, Holder: a.holder, LastSuccessNS: cur.LastSuccessNS, Reason: a.reason}
	switch a.kind {
	case granted:
		return r.granted(s, a, sent, now)
	case refusedFenced:
		s.Status, s.LastSuccessNS = fencestate.Fenced, sent.UnixNano()
		s.Message = r.fencedMessage(a)
		return s, sent.Add(stale)
	case refusedRegressed:
		s.Status, s.LastSuccessNS = fencestate.EpochRegressed, sent.UnixNano()
		s.Message = r.regressedMessage(a)
		return s, sent.Add(stale)
	case refusedAcquiring:
		s.Status, s.LastSuccessNS = fencestate.Acquiring, sent.UnixNano()
		s.Message = fmt.Sprintf("cluster %s is taking the fence over from %s; it becomes active when %s releases the fence or its lease ends (in about %s)",
			r.self.Describe(), a.holder.Describe(), a.holder.Name, a.retryAfter)
		return s, sent.Add(stale)
	case refusedPermission:
		// No answer about the fence: the last one stays the last.
		s.Status, s.Holder = fencestate.Unknown, cur.Holder
		s.Message = fmt.Sprintf("the fence authority refuses identity %q: %s. Cluster %s does not act as holder until the authority's authorization file lets this identity declare as %s",
			a.identity, statusMessage(a.err), r.self.Describe(), r.self.Name)
		return s, time.Time{}
	case refusedRestored:
		// Until a generation is adopted or the epoch raised: no expiry.
		s.Status, s.Holder, s.LastSuccessNS = fencestate.Unknown, cur.Holder, sent.UnixNano()
		s.Message = r.restoredMessage(a)
		return s, time.Time{}
	case refusedStep, refusedOther:
		// A step refusal reaches this only when no epoch was accepted
		// before to go back to (see epochs).
		s.Status, s.Holder, s.LastSuccessNS = fencestate.Unknown, cur.Holder, sent.UnixNano()
		s.Message = fmt.Sprintf("the fence authority refused cluster %s's declaration, which does not act as holder: %s", r.self.Describe(), statusMessage(a.err))
		return s, time.Time{}
	case unsupported:
		s.Status, s.Holder = fencestate.Unsupported, fencestate.Cluster{}
		s.Message = fmt.Sprintf("the fence authority does not implement the fence protocol (fencegate.fence.v1.FenceService); point the agent at a fencegate authority. This cluster stays fenced. Authority: %s", statusMessage(a.err))
		return s, time.Time{}
	case transient:
		// A failed call says nothing about the fence: keep the last
		// status until it expires. Only a status that is already unknown
		// learns why, so that operators can read it in data.fence.
		if cur.Status == fencestate.Unknown {
			cur.Message = fmt.Sprintf("%s; the last declaration failed: %s", unknownMessage(cur), statusMessage(a.err))
		}
		return cur, curExpires
	default:
		s.Status, s.Holder = fencestate.Unknown, cur.Holder
		s.Message = fmt.Sprintf("the fence authority answered with an error that is not a fence status, so cluster %s does not act as holder: %s", r.self.Describe(), statusMessage(a.err))
		return s, time.Time{}
	}
}

// granted is an OK answer: active until the lease's send time + lease TTL
// − margin, the earliest moment the authority may consider the lease over,
// less the margin. The lease's send time is sent's for a new lease, and
// earlier for a lease the declaration asked to keep.
func (r rules) granted(s fencestate.State, a answer, sent, now time.Time) (fencestate.State, time.Time) {
	s.LastSuccessNS = sent.UnixNano()
	if a.holder.UID != r.self.UID {
		s.Status, s.Reason = fencestate.Unknown, fencestate.ReasonUnexpectedError
		s.Message = fmt.Sprintf("the fence authority granted the fence but named %s (uid %s) as holder instead of this cluster (uid %s); this cluster does not act as holder", a.holder.Describe(), a.holder.UID, r.self.UID)
		return s, time.Time{}
	}
	validUntil := a.leaseSent.Add(a.leaseTTL - r.margin)
	if !validUntil.After(now) {
		s.Status, s.Reason = fencestate.Unknown, fencestate.ReasonLeaseExpired
		s.Message = fmt.Sprintf("the fence authority granted a lease of %s, but less the lease margin of %s it had ended when the answer arrived (%s after the declaration that got it was sent); lower --lease-margin, raise the authority's lease TTL, or check the latency to the authority",
			a.leaseTTL, r.margin, now.Sub(a.leaseSent))
		return s, time.Time{}
	}
	s.Status, s.Token, s.ValidUntilNS = fencestate.Active, a.token, validUntil.UnixNano()
	if a.grant == grantAfterExpiry && r.grace > 0 && !a.acquired.IsZero() {
		// The previous holder was cut off: it began suspending its
		// actuators when its validity ended, a margin before this grant,
		// and has the grace on top. The grant's time is the authority's,
		// so the grace also covers the offset between the two clocks.
		s.ResumeAtNS = a.acquired.Add(r.grace).UnixNano()
	}
	return s, validUntil
}

func (r rules) regressedMessage(a answer) string {
	before := "a higher epoch"
	fix := "set its epoch above every epoch it declared before"
	if a.highestEpoch > 0 {
		before = fmt.Sprintf("epoch %d", a.highestEpoch)
		fix = fmt.Sprintf("set its epoch to at least %d", a.highestEpoch)
	}
	return fmt.Sprintf("cluster %s declared epoch %d, but the same cluster (uid %s) declared %s before: it was restored from a backup or its epoch was lowered. It stays fenced; %s, and above the holder's (%s) to take the fence over. Authority: %s",
		r.self.Name, r.self.Epoch, r.self.UID, before, fix, a.holder.Describe(), statusMessage(a.err))
}

// restoredMessage explains CLUSTER_RESTORED and what to do about it.
func (r rules) restoredMessage(a answer) string {
	generation := "a generation of it that the fence authority has moved past"
	if a.generation > 0 {
		generation = fmt.Sprintf("generation %d, but the fence authority has moved on to generation %d", a.presentedGeneration, a.generation)
	}
	return fmt.Sprintf("cluster %s presents %s: this control plane looks restored from a backup of %s, and it admits nothing. "+
		"If this copy should take over, fail over to it (%s raises its epoch); otherwise remove it. "+
		"It declares again at every heartbeat, and recovers by itself once it learns the current generation (from the Fence status its healthy peers write) or its epoch is raised. Authority: %s",
		r.self.Describe(), generation, r.self.Name, rpctypes.FailoverCommand(r.domain, r.self.Name), statusMessage(a.err))
}

// epochRefusal is the EpochRefusal of a's refusal of epoch refused for its
// step, while the agent goes on declaring accepted.
func (r rules) epochRefusal(a answer, refused, accepted uint64) *fencestate.EpochRefusal {
	limit := "too far above the highest epoch declared in the domain"
	fix := fmt.Sprintf("set the Fence's spec.epoch back to %d", accepted)
	if a.highestEpoch > 0 && a.maxEpochStep > 0 {
		most := a.highestEpoch + min(a.maxEpochStep, math.MaxUint64-a.highestEpoch)
		limit = fmt.Sprintf("more than %d above %d, the highest epoch declared in the domain", a.maxEpochStep, a.highestEpoch)
		fix = fmt.Sprintf("set the Fence's spec.epoch back to at most %d, or to %d", most, accepted)
	}
	return &fencestate.EpochRefusal{
		Epoch:  refused,
		Reason: a.reason,
		Message: fmt.Sprintf("the fence authority refused epoch %d for cluster %s: it is %s. The cluster goes on declaring epoch %d, the last epoch the authority accepted, and keeps its fence status. "+
			"To declare another epoch, %s (one above the holder's epoch is enough to take the fence over). Authority: %s",
			refused, r.self.Name, limit, accepted, fix, statusMessage(a.err)),
	}
}

func (r rules) fencedMessage(a answer) string {
	if a.fenceReason == rpctypes.FenceReasonRevoked {
		return fmt.Sprintf("cluster %s's lease of the fence was revoked: it stops acting as holder and releases the fence. Authority: %s", r.self.Describe(), statusMessage(a.err))
	}
	if a.holder.UID == r.self.UID {
		return fmt.Sprintf("cluster %s held the fence, but a cluster with a higher epoch is taking it over: this cluster stops acting as holder and releases the fence. To keep it active instead, raise its epoch above the new one", r.self.Describe())
	}
	return fmt.Sprintf("cluster %s is fenced: %s holds the fence (or a takeover by a higher epoch is pending). Components cannot be changed here; to make this cluster active, raise its epoch above %d",
		r.self.Describe(), a.holder.Describe(), max(a.holder.Epoch, r.self.Epoch))
}

// expired is the state once cur has gone unrenewed past its expiry. It
// names the epoch cur's answer was for: no answer was given for another.
func (r rules) expired(cur fencestate.State) fencestate.State {
	s := fencestate.State{Status: fencestate.Unknown, Domain: r.domain, Cluster: cur.Cluster, Holder: cur.Holder, LastSuccessNS: cur.LastSuccessNS}
	if cur.Status == fencestate.Active {
		s.Reason = fencestate.ReasonLeaseExpired
		s.Message = fmt.Sprintf("the fence lease of cluster %s ran out at %s without renewal; it no longer acts as holder. %s",
			cur.Cluster.Describe(), time.Unix(0, cur.ValidUntilNS).UTC().Format(time.RFC3339Nano), lastAnswer(cur))
		return s
	}
	s.Reason = fencestate.ReasonAuthorityUnreachable
	s.Message = fmt.Sprintf("the last fence status of cluster %s (%s) is too old to rely on. %s", cur.Cluster.Describe(), cur.Status, lastAnswer(cur))
	return s
}

// shuttingDown is the state the agent leaves behind when it stops: not
// holding, so that a process whose webhook still answers admits nothing
// after its lease is released. Like expired, it names cur's epoch.
func (r rules) shuttingDown(cur fencestate.State) fencestate.State {
	return fencestate.State{
		Status: fencestate.Unknown, Domain: r.domain, Cluster: cur.Cluster, Holder: cur.Holder, LastSuccessNS: cur.LastSuccessNS,
		Reason: fencestate.ReasonShuttingDown,
		Message: fmt.Sprintf("the fence agent of cluster %s (instance %s) has stopped: this process is shutting down, gives its lease up and no longer acts as holder",
			cur.Cluster.Describe(), r.instance),
	}
}

// unknownMessage is the part of an unknown state's message that does not
// change from one failed call to the next.
func unknownMessage(s fencestate.State) string {
	if s.Reason == fencestate.ReasonNoAnswerYet {
		return fmt.Sprintf("cluster %s has no answer from the fence authority yet", s.Cluster.Describe())
	}
	return fmt.Sprintf("the fence status of cluster %s is unknown (%s). %s", s.Cluster.Describe(), s.Reason, lastAnswer(s))
}

func lastAnswer(s fencestate.State) string {
	if s.LastSuccessNS == 0 {
		return "The fence authority never answered"
	}
	return "The last answer of the fence authority was to a declaration sent at " + time.Unix(0, s.LastSuccessNS).UTC().Format(time.RFC3339Nano)
}

// statusMessage is the human part of a gRPC error.
func statusMessage(err error) string {
	if st, ok := rpctypes.Status(err); ok {
		return fmt.Sprintf("%s: %s", st.Code(), st.Message())
	}
	return err.Error()
}
