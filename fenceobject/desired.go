package fenceobject

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
)

// Inputs are everything the leader's part of a Fence's status depends on.
type Inputs struct {
	// State is the fence state the leader's policies see.
	State fencestate.State
	// Message is what the policies say about State (the reconcile
	// decision's message).
	Message string
	// TargetEpoch is the epoch this cluster is asked to declare:
	// max(--epoch, spec.epoch); Generation the object's generation.
	TargetEpoch uint64
	Generation  int64
	// Authority is what the authority said of the fence when State began;
	// nil when it could not be asked.
	Authority *AuthorityView
	// Live names the instances that run (their Lease has not ended), the
	// leader's own included; the old status's entries say what each
	// applies.
	Live []string
	// Marks is where the controller stands in marking the Components.
	Marks controller.MarkProgress
	// Holds is where the hold controller stands in holding the actuators'
	// objects; nil when no kinds are held here.
	Holds *hold.Progress
	// Now is the time of the derivation.
	Now time.Time
}

// AuthorityView is what the authority's GetFence adds to the agent's state:
// a pending takeover and, while one is pending, the end of the holder's
// last lease that has not been released.
type AuthorityView struct {
	Pending        *fencegatev1alpha1.FenceCluster
	LeaseExpiresAt time.Time
}

// Desired returns the status the Fence must have, all but
// status.instances (each instance applies its own entry), given the one it
// has. It is a pure function: a condition that keeps its status keeps its
// LastTransitionTime, Since and LastDeclaration move only when what they
// date does, and times are whole seconds as the API server stores them, so
// that writing the result back is a no-op when nothing changed.
func Desired(old fencegatev1alpha1.ClusterFenceStatus, in Inputs) fencegatev1alpha1.ClusterFenceStatus {
	s := in.State
	now := metav1.NewTime(in.Now.Truncate(time.Second))
	st := fencegatev1alpha1.ClusterFenceStatus{
		Conditions:         slices.Clone(old.Conditions),
		ObservedGeneration: old.ObservedGeneration,
		State:              string(s.Status),
		FenceReason:        s.Reason,
		Epoch:              old.Epoch,
		Token:              int64(s.Token), //nolint:gosec // tokens are etcd revisions, far below 2^63
		Since:              old.Since,
		LastDeclaration:    old.LastDeclaration,
		Components:         old.Components,
		ClusterGeneration:  old.ClusterGeneration,
	}
	if s.LastSuccessNS != 0 && !stepRefused(s) {
		// status.epoch is an epoch the authority accepted (the CEL rule
		// lets a spec.epoch above it be lowered back to it): a leader
		// that has no answer yet, or whose epoch was refused for its step
		// with none accepted before, keeps the one the status has.
		st.Epoch = int64(s.Cluster.Epoch) //nolint:gosec // epochs are far below 2^63
	}
	if g := highestGeneration(s, old.Instances, in.Live); g != 0 {
		// None known (before the first answer) keeps the one the status
		// has: the cluster's next processes present it.
		st.ClusterGeneration = int64(g) //nolint:gosec // generations are far below 2^63
	}
	if s.Cluster.Name != "" {
		st.Cluster = &fencegatev1alpha1.FenceCluster{Name: s.Cluster.Name, UID: s.Cluster.UID, Epoch: st.Epoch}
	}
	if s.Cluster.Epoch >= in.TargetEpoch && !stepRefused(s) {
		st.ObservedGeneration = in.Generation
	}
	if s.Holder.Name != "" {
		st.Holder = &fencegatev1alpha1.FenceCluster{Name: s.Holder.Name, UID: s.Holder.UID, Epoch: int64(s.Holder.Epoch)} //nolint:gosec // as above
	}
	if a := in.Authority; a != nil && a.Pending != nil {
		st.Pending = a.Pending.DeepCopy()
		if !a.LeaseExpiresAt.IsZero() {
			st.LeaseExpiresAt = &metav1.Time{Time: a.LeaseExpiresAt.Truncate(time.Second)}
		}
	}
	if old.State != st.State || st.Since == nil {
		st.Since = &now
	}
	if changed(old, st) && s.LastSuccessNS != 0 {
		st.LastDeclaration = &metav1.Time{Time: time.Unix(0, s.LastSuccessNS).Truncate(time.Second)}
	}

	row := conditionsOf(s)
	reason := row.reason
	holding := metav1.Condition{Type: fencegatev1alpha1.ConditionHolding, Status: metav1.ConditionFalse, Reason: reason, Message: in.Message, ObservedGeneration: st.ObservedGeneration}
	if s.Status == fencestate.Active {
		holding.Status = metav1.ConditionTrue
	}
	if row.agentMessage && s.Message != "" {
		holding.Message = s.Message
	}
	setCondition(&st.Conditions, holding, now)
	setCondition(&st.Conditions, epochAccepted(s, row, in.TargetEpoch, in.Generation), now)

	enforced := metav1.Condition{Type: fencegatev1alpha1.ConditionEnforced, Status: metav1.ConditionTrue, Reason: reason, ObservedGeneration: st.ObservedGeneration}
	lagging := laggingInstances(EntryOf("", s), old.Instances, in.Live)
	marked := in.Marks.Started && in.Marks.Key == s.Key() && in.Marks.Pending == 0
	switch {
	case len(lagging) > 0 || !marked:
		enforced.Status = metav1.ConditionFalse
		enforced.Message = notEnforcedMessage(s, lagging, marked, len(in.Live))
	default:
		enforced.Message = fmt.Sprintf("every fencegate replica (%d) answers admission from this state (%s) and the controller has marked every Component for it", len(in.Live), s.Key())
		// The counts are those of marks made for this state only once
		// every Component has one: midway they mix two states.
		st.Components = &fencegatev1alpha1.FenceComponents{
			Held:    int32(in.Marks.Held),  //nolint:gosec // far fewer Components than 2^31
			Total:   int32(in.Marks.Total), //nolint:gosec // as above
			Summary: fmt.Sprintf("%d/%d held", in.Marks.Held, in.Marks.Total),
		}
	}
	setCondition(&st.Conditions, enforced, now)
	quiesced, held := quiescedOf(s, in.Holds, old.Held, in.Now)
	setCondition(&st.Conditions, quiesced, now)
	st.Held = held
	return st
}

// quiescedOf derives the Quiesced condition and status.held from the hold
// controller's progress. The counts are those decided for state s only
// once every object is decided: midway they mix two states, and the old
// counts stay.
func quiescedOf(s fencestate.State, p *hold.Progress, old *fencegatev1alpha1.FenceHeld, now time.Time) (metav1.Condition, *fencegatev1alpha1.FenceHeld) {
	c := metav1.Condition{Type: fencegatev1alpha1.ConditionQuiesced, Status: metav1.ConditionFalse}
	if p == nil {
		c.Status, c.Reason = metav1.ConditionUnknown, fencegatev1alpha1.ReasonNoHeldKinds
		c.Message = "no kinds of actuators are held on this cluster (the release's hold.kinds is empty): nothing tells whether it has gone quiet"
		return c, nil
	}
	if !p.Decided(s.Key()) {
		c.Reason = fencegatev1alpha1.ReasonHoldsPending
		pending := 0
		for _, k := range p.Kinds {
			pending += k.Pending
		}
		c.Message = fmt.Sprintf("the actuators' objects are being decided for this state (%s): %d not yet", s.Key(), pending)
		return c, old
	}
	total, quiet := p.Counts()
	held := &fencegatev1alpha1.FenceHeld{
		Held: int32(total), Quiet: int32(quiet), //nolint:gosec // far fewer objects than 2^31
		Summary: fmt.Sprintf("%d/%d quiet", quiet, total),
	}
	var activity []string
	for _, k := range p.Kinds {
		if k.Held > 0 {
			held.Kinds = append(held.Kinds, fencegatev1alpha1.FenceHeldKind{Kind: k.Kind, Held: int32(k.Held), Quiet: int32(k.Quiet)}) //nolint:gosec // as above
		}
		activity = append(activity, k.Activity...)
	}
	unserved := ""
	if len(p.Unserved) > 0 {
		unserved = fmt.Sprintf("; the API server serves none of %s", strings.Join(p.Unserved, ", "))
	}
	switch {
	case s.Status == fencestate.Active && s.ResumeAtNS > now.UnixNano():
		c.Reason = fencegatev1alpha1.ReasonFenceHeld
		c.Message = fmt.Sprintf("this cluster holds the fence; its actuators stay held until %s, the takeover grace after the previous holder's lease expired",
			time.Unix(0, s.ResumeAtNS).UTC().Format(time.RFC3339))
	case s.Status == fencestate.Active:
		c.Reason = fencegatev1alpha1.ReasonFenceHeld
		c.Message = "this cluster holds the fence: its actuators act"
	case quiet < total:
		c.Reason = fencegatev1alpha1.ReasonNotQuiet
		c.Message = fmt.Sprintf("%d of %d held objects have not gone quiet: %s", total-quiet, total, strings.Join(activity, " | "))
	default:
		c.Status, c.Reason = metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced
		c.Message = fmt.Sprintf("every held object (%d) has gone quiet%s", total, unserved)
	}
	return c, held
}

// stepRefused reports whether s is the authority's refusal of the epoch it
// names for its step, with no lower epoch accepted to go back to (a process
// that started at a typo): nothing was recorded at that epoch, so it is no
// epoch this cluster declared, only one it asks for. After an accepted one,
// the agent declares that one instead and s names it (s.EpochRefused).
func stepRefused(s fencestate.State) bool {
	return s.Reason == rpctypes.ReasonEpochStepTooLarge && s.EpochRefused == nil
}

// highestGeneration is the cluster generation the status keeps: the highest
// that the leader's agent (s) and the live instances' agents present; 0 for
// none. A leader whose own agent was cut off long enough to be refused as
// restored then learns the current generation from its peers, through the
// status every instance adopts. Each of these generations came from this
// cluster's own accepted answers (or from the status, which holds nothing
// else), never from a CLUSTER_RESTORED refusal: a copy restored from a
// backup, whose instances are all refused, still cannot learn the real
// cluster's current generation from them.
func highestGeneration(s fencestate.State, entries []fencegatev1alpha1.FenceInstance, live []string) uint64 {
	g := s.ClusterGeneration
	for _, e := range entries {
		if slices.Contains(live, e.Name) && e.ClusterGeneration > 0 {
			g = max(g, uint64(e.ClusterGeneration))
		}
	}
	return g
}

// changed reports whether what the fence says of this cluster differs
// between two statuses: the fields a declaration's answer sets.
func changed(a, b fencegatev1alpha1.ClusterFenceStatus) bool {
	return a.State != b.State || a.FenceReason != b.FenceReason || a.Epoch != b.Epoch || a.Token != b.Token || a.ClusterGeneration != b.ClusterGeneration ||
		!ptrEqual(a.Cluster, b.Cluster) || !ptrEqual(a.Holder, b.Holder) || !ptrEqual(a.Pending, b.Pending)
}

func ptrEqual[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// stateConditions is what a fence state makes of the Fence's conditions.
type stateConditions struct {
	// status and fenceReason match a state; empty matches any.
	status      fencestate.Status
	fenceReason string
	// reason is the reason of Holding and Enforced.
	reason string
	// agentMessage makes the agent's message Holding's, where the
	// policies' words (made for a status, not for this reason) would send
	// a person the wrong way.
	agentMessage bool
	// epoch is EpochAccepted's status when the state is the answer to the
	// epoch asked for: True when that answer accepts it, False when it
	// refuses it, Unknown when it does not tell.
	epoch metav1.ConditionStatus
}

// stateTable holds the conditions of every fence state, the first row
// that matches a state applying. A status that is unknown tells nothing by
// itself: the agent's reason then tells refusals apart.
var stateTable = []stateConditions{
	{status: fencestate.Active, reason: fencegatev1alpha1.ReasonFenceHeld, epoch: metav1.ConditionTrue},
	{status: fencestate.Fenced, reason: fencegatev1alpha1.ReasonClusterFenced, epoch: metav1.ConditionTrue},
	{status: fencestate.EpochRegressed, reason: fencegatev1alpha1.ReasonEpochRegressed, epoch: metav1.ConditionFalse},
	{status: fencestate.Acquiring, reason: fencegatev1alpha1.ReasonFenceAcquiring, epoch: metav1.ConditionTrue},
	{fenceReason: rpctypes.ReasonPermissionDenied, reason: fencegatev1alpha1.ReasonPermissionDenied, epoch: metav1.ConditionUnknown},
	// A copy restored from a backup enforces being fenced: it admits
	// nothing, whatever its epoch, until a failover raises the epoch.
	{fenceReason: rpctypes.ReasonClusterRestored, reason: fencegatev1alpha1.ReasonClusterRestored, agentMessage: true, epoch: metav1.ConditionUnknown},
	{reason: fencegatev1alpha1.ReasonFenceUnknown, epoch: metav1.ConditionUnknown},
}

// conditionsOf returns the row of stateTable that applies to s.
func conditionsOf(s fencestate.State) stateConditions {
	for _, row := range stateTable {
		if (row.status == "" || row.status == s.Status) && (row.fenceReason == "" || row.fenceReason == s.Reason) {
			return row
		}
	}
	return stateTable[len(stateTable)-1]
}

// Reason is the reason of a Fence's conditions for a fence state.
func Reason(s fencestate.State) string { return conditionsOf(s).reason }

// epochAccepted is the EpochAccepted condition: whether the authority
// accepts target, the epoch this cluster is asked to declare, at the
// object's generation. s.Cluster.Epoch is the epoch the agent declares: the
// one the state answers, and the last accepted one while a higher one is
// refused (s.EpochRefused). One refused for its step with none accepted
// before (stepRefused) was never recorded: a target below it is no lowering.
func epochAccepted(s fencestate.State, row stateConditions, target uint64, generation int64) metav1.Condition {
	c := metav1.Condition{Type: fencegatev1alpha1.ConditionEpochAccepted, ObservedGeneration: generation}
	declared := s.Cluster.Epoch
	switch {
	case s.EpochRefused != nil:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, fencegatev1alpha1.ReasonEpochStepTooLarge, s.EpochRefused.Message
	case stepRefused(s) && target == declared:
		c.Status, c.Reason = metav1.ConditionFalse, fencegatev1alpha1.ReasonEpochStepTooLarge
		c.Message = fmt.Sprintf("the fence authority refused epoch %d as too far above the highest epoch declared in the domain, and this cluster's leader had no lower epoch accepted to go back to: it does not act as holder. "+
			"Lower spec.epoch to an epoch the authority accepts, not below status.epoch (with no status.epoch, delete the Fence: fencegate makes it again without the refused epoch); it is declared at once. %s", declared, s.Message)
	case target < declared && !stepRefused(s):
		c.Status, c.Reason = metav1.ConditionFalse, fencegatev1alpha1.ReasonEpochBelowAccepted
		c.Message = fmt.Sprintf("the epoch asked for, %d (max(--epoch, spec.epoch)), is below epoch %d that this cluster already declares: an epoch only rises, so the cluster goes on declaring %d. Set spec.epoch to %d or more (a Fence made again by hand starts below it)", target, declared, declared, declared)
	case target > declared || row.epoch == metav1.ConditionUnknown:
		c.Status, c.Reason = metav1.ConditionUnknown, fencegatev1alpha1.ReasonEpochPending
		c.Message = fmt.Sprintf("the fence authority has not accepted epoch %d yet; this cluster's fence state: %s (%s)", target, s.Key(), row.reason)
	case row.epoch == metav1.ConditionFalse:
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, row.reason, s.Message
	default:
		c.Status, c.Reason = metav1.ConditionTrue, fencegatev1alpha1.ReasonEpochAccepted
		c.Message = fmt.Sprintf("the fence authority accepts epoch %d", target)
	}
	return c
}

// EntryOf is the entry of status.instances of an instance that applies s.
// Since is left for the instance to set.
func EntryOf(instance string, s fencestate.State) fencegatev1alpha1.FenceInstance {
	e := fencegatev1alpha1.FenceInstance{
		Name:              instance,
		State:             string(s.Status),
		Epoch:             int64(s.Cluster.Epoch),     //nolint:gosec // epochs are far below 2^63
		Token:             int64(s.Token),             //nolint:gosec // tokens are etcd revisions, far below 2^63
		ClusterGeneration: int64(s.ClusterGeneration), //nolint:gosec // generations are far below 2^63
	}
	e.Holder = s.Key().HolderRef()
	return e
}

// sameState reports whether two entries apply the same state. The cluster
// generation is no part of it: it changes no admission decision.
func sameState(a, b fencegatev1alpha1.FenceInstance) bool {
	return a.State == b.State && a.Epoch == b.Epoch && a.Holder == b.Holder && a.Token == b.Token
}

// sameEntry reports whether two entries say the same: the same state and
// the same cluster generation, which the leader reads from the entries.
func sameEntry(a, b fencegatev1alpha1.FenceInstance) bool {
	return sameState(a, b) && a.ClusterGeneration == b.ClusterGeneration
}

// laggingInstances describes each live instance whose entry does not apply
// want, in name order.
func laggingInstances(want fencegatev1alpha1.FenceInstance, entries []fencegatev1alpha1.FenceInstance, live []string) []string {
	var out []string
	for _, name := range slices.Sorted(slices.Values(live)) {
		i := slices.IndexFunc(entries, func(e fencegatev1alpha1.FenceInstance) bool { return e.Name == name })
		switch {
		case i < 0:
			out = append(out, fmt.Sprintf("%s has not reported what it applies yet", name))
		case !sameState(entries[i], want):
			out = append(out, fmt.Sprintf("%s still applies %s", name, describeEntry(entries[i])))
		}
	}
	return out
}

func notEnforcedMessage(s fencestate.State, lagging []string, marked bool, live int) string {
	var parts []string
	if len(lagging) > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d fencegate replicas do not apply it yet: %s", len(lagging), live, strings.Join(lagging, "; ")))
	}
	if !marked {
		parts = append(parts, "the controller is re-marking the Components for it")
	}
	return fmt.Sprintf("this cluster is not enforcing its fence state (%s) everywhere yet: %s", s.Key(), strings.Join(parts, ", and "))
}

// describeEntry names the state an entry applies, as fencestate.Key does;
// an entry whose holder does not read back (edited by hand) says so.
func describeEntry(e fencegatev1alpha1.FenceInstance) string {
	k := fencestate.Key{Status: fencestate.Status(e.State), Epoch: uint64(e.Epoch), Token: uint64(e.Token)} //nolint:gosec // written from uint64s
	if err := k.ParseHolderRef(e.Holder); err != nil {
		return fmt.Sprintf("%s (%v)", k, err)
	}
	return k.String()
}

// setCondition is meta.SetStatusCondition with an injected time.
func setCondition(conditions *[]metav1.Condition, c metav1.Condition, now metav1.Time) {
	c.LastTransitionTime = now
	meta.SetStatusCondition(conditions, c)
}
