package failover

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fencestate"
)

// Step is one thing a failover goes through, in the order the timeline
// lists them.
type Step int

// The steps of a failover.
const (
	// StepDeclared: the target declares the new epoch.
	StepDeclared Step = iota
	// StepHolderTold: the old holder was told it is fenced.
	StepHolderTold
	// StepHolderStopped: every replica of the old holder stopped admitting.
	StepHolderStopped
	// StepGranted: the target holds the fence.
	StepGranted
	// StepHolderMarked: the old holder's Components are re-marked and it
	// enforces being fenced.
	StepHolderMarked
	// StepTargetMarked: the target's Components are re-marked and it
	// enforces holding the fence.
	StepTargetMarked
	// StepHolderQuiesced: every actuator object the old holder holds has
	// gone quiet (its Fence's Quiesced condition), or it holds none.
	StepHolderQuiesced
	// StepHolderHeld: the old holder has held every actuator object of
	// the domain (some may still be going quiet): in a planned handover it
	// comes before the grant, since the old holder releases the fence only
	// then.
	StepHolderHeld
	// StepTargetResumed: the target holds the fence and holds none of its
	// actuators any more (after its takeover grace, when it was granted
	// after the old holder's lease expired).
	StepTargetResumed

	// stepCount counts the steps.
	stepCount
)

// names of the steps, as the timeline prints them.
var stepNames = [...]string{
	StepDeclared:       "epoch declared",
	StepHolderTold:     "old holder told",
	StepHolderStopped:  "old holder stopped admitting",
	StepGranted:        "fence granted",
	StepHolderMarked:   "old holder re-marked",
	StepTargetMarked:   "new holder re-marked",
	StepHolderQuiesced: "old holder quiesced",
	StepHolderHeld:     "old holder held its actuators",
	StepTargetResumed:  "new holder resumed its actuators",
}

func (s Step) String() string { return stepNames[s] }

// clockSkew is how far behind the failover's clock the old holder's clock
// may be: its conditions' times are its own, in whole seconds.
const clockSkew = time.Second

// Refused is the end of a failover that cannot succeed as it is: what the
// target's Fence says and why.
type Refused struct {
	// Why is the refusal in a few words: the target is regressed, the
	// authority is unreachable, permission is denied, …
	Why string
	// Message is what the target's Fence says.
	Message string
}

func (r *Refused) Error() string { return r.Why + ": " + r.Message }

// Progress follows a failover of the fence to one cluster, from one
// observation of the Fences to the next. It does no I/O: Observe decides
// from the Fences it is given and the steps seen before, which it records
// in the Progress, which steps the objects show for the first time and
// whether the failover is done or refused.
type Progress struct {
	// Epoch is the epoch the target was asked to declare; Generation is
	// the target Fence's generation that asks it.
	Epoch      uint64
	Generation int64
	// WithHolder is false when the old holder's Fence is not followed (no
	// --from, or it is unreachable).
	WithHolder bool
	// Raised is when the failover raised the target's spec.epoch; zero
	// when it raised nothing (the target declared Epoch already). The
	// old holder's Fence shows a step only once it names the target, as
	// holder or pending takeover, at Epoch or above, and, when Raised is
	// set, a condition of it changed since then: a Fence whose status
	// writer is stuck on the failover before shows nothing.
	Raised time.Time
	// StaleRefusal is the message of the target's EpochAccepted condition
	// when it was False before the raise. Until the target's agent has the
	// authority's answer to Epoch, its Fence may show that refusal at the
	// new generation; it is no answer to Epoch.
	StaleRefusal string

	seen [stepCount]bool
}

// Observation is what Observe makes of the Fences.
type Observation struct {
	// Steps are the steps seen for the first time, each with what shows
	// it.
	Steps []Seen
	// Done is set once the target holds the fence and enforces it, and
	// the old holder (when followed) is fenced by the target and enforces
	// it.
	Done bool
	// Quiesced is set once the old holder (when followed) is fenced by
	// the target and its held actuators have gone quiet, or it holds
	// none.
	Quiesced bool
	// Refused is set when the target's answer to the new epoch is a
	// refusal.
	Refused *Refused
}

// Seen is a step and what shows it.
type Seen struct {
	Step   Step
	Detail string
}

// Observe takes the latest Fences of the target and of the old holder (nil
// when not followed), and records the steps they show as seen.
func (p *Progress) Observe(target, holder *fencegatev1alpha1.Fence) Observation {
	var o Observation
	see := func(s Step, format string, args ...any) {
		if !p.seen[s] {
			p.seen[s] = true
			o.Steps = append(o.Steps, Seen{s, fmt.Sprintf(format, args...)})
		}
	}
	name := clusterName(target)
	st := target.Status
	declared := st.Epoch >= int64(p.Epoch) //nolint:gosec // epochs are far below 2^63
	if declared {
		see(StepDeclared, "%s declares epoch %d (%s)", name, st.Epoch, st.State)
	}
	if p.WithHolder && holder != nil && p.current(holder, name) {
		h := holder.Status
		hname := clusterName(holder)
		// The old holder's steps follow one another on its own Fence,
		// which its fencegate writes as it goes; the target's Fence may
		// show the grant before or after it.
		if h.State != "" && h.State != string(fencestate.Active) {
			see(StepHolderTold, "%s: %s, %s", hname, h.State, condition(holder, fencegatev1alpha1.ConditionHolding).Reason)
		}
		if p.seen[StepHolderTold] && len(h.Instances) > 0 && noneActive(h.Instances) {
			see(StepHolderStopped, "every replica of %s (%d) applies %s", hname, len(h.Instances), h.Instances[0].State)
		}
		if p.seen[StepHolderStopped] && fencedBy(holder, name) && meta.IsStatusConditionTrue(h.Conditions, fencegatev1alpha1.ConditionEnforced) {
			see(StepHolderMarked, "%s: %s", hname, components(h))
		}
		q := condition(holder, fencegatev1alpha1.ConditionQuiesced)
		if p.seen[StepHolderTold] {
			// Held comes before the grant: the old holder releases the
			// fence only then, while its Fence still names it holder.
			switch q.Reason {
			case fencegatev1alpha1.ReasonQuiesced, fencegatev1alpha1.ReasonNotQuiet:
				see(StepHolderHeld, "%s: %s held objects", hname, heldObjects(h))
			case fencegatev1alpha1.ReasonNoHeldKinds:
				see(StepHolderHeld, "%s holds no actuators (no kinds held)", hname)
			}
		}
		if p.seen[StepHolderTold] && fencedBy(holder, name) {
			switch {
			case q.Status == metav1.ConditionTrue:
				see(StepHolderQuiesced, "%s: %s held objects, all quiet", hname, heldObjects(h))
			case q.Reason == fencegatev1alpha1.ReasonNoHeldKinds:
				see(StepHolderQuiesced, "%s holds no actuators (no kinds held)", hname)
			}
		}
	}
	holding := meta.IsStatusConditionTrue(st.Conditions, fencegatev1alpha1.ConditionHolding) && declared
	if holding {
		see(StepGranted, "%s holds the fence at epoch %d, token %d", name, st.Epoch, st.Token)
	}
	if holding {
		switch {
		case st.Held != nil && st.Held.Held == 0:
			see(StepTargetResumed, "%s holds none of its actuators", name)
		case condition(target, fencegatev1alpha1.ConditionQuiesced).Reason == fencegatev1alpha1.ReasonNoHeldKinds:
			see(StepTargetResumed, "%s holds no actuators (no kinds held)", name)
		}
	}
	if holding && st.ObservedGeneration >= p.Generation && meta.IsStatusConditionTrue(st.Conditions, fencegatev1alpha1.ConditionEnforced) {
		see(StepTargetMarked, "%s: %s", name, components(st))
	}
	o.Done = p.seen[StepGranted] && p.seen[StepTargetMarked] && (!p.WithHolder || p.seen[StepHolderMarked])
	o.Quiesced = p.WithHolder && p.seen[StepHolderQuiesced]
	switch {
	case !declared:
		o.Refused = p.epochRefusal(target)
		if o.Refused == nil && p.sawRaise(target) {
			// The epoch is not accepted while the target cannot
			// declare at all.
			o.Refused = cannotDeclare(target)
		}
	case !holding:
		o.Refused = refusal(target, p.Epoch)
	}
	return o
}

// sawRaise reports whether the target's fencegate has judged the epoch
// asked for at the raised generation: its EpochAccepted condition observes
// it.
func (p *Progress) sawRaise(target *fencegatev1alpha1.Fence) bool {
	c := meta.FindStatusCondition(target.Status.Conditions, fencegatev1alpha1.ConditionEpochAccepted)
	return c != nil && c.ObservedGeneration >= p.Generation
}

// current reports whether the old holder's Fence f is one of this
// failover (see Progress.Raised): it names the target as holder or pending
// takeover at Epoch or above, and its Holding or Enforced condition changed
// since the raise, give or take clockSkew.
func (p *Progress) current(f *fencegatev1alpha1.Fence, target string) bool {
	names := func(c *fencegatev1alpha1.FenceCluster) bool {
		return c != nil && c.Name == target && c.Epoch >= int64(p.Epoch) //nolint:gosec // epochs are far below 2^63
	}
	if !names(f.Status.Holder) && !names(f.Status.Pending) {
		return false
	}
	if p.Raised.IsZero() {
		return true
	}
	since := p.Raised.Truncate(time.Second).Add(-clockSkew)
	return slices.ContainsFunc(f.Status.Conditions, func(c metav1.Condition) bool {
		return (c.Type == fencegatev1alpha1.ConditionHolding || c.Type == fencegatev1alpha1.ConditionEnforced) && !c.LastTransitionTime.Time.Before(since)
	})
}

// epochRefusal says why the target, which does not declare Epoch yet, will
// not: its EpochAccepted condition is False for the generation that asks
// for Epoch (EpochStepTooLarge, or any other reason), and is not the
// refusal it showed before the raise.
func (p *Progress) epochRefusal(target *fencegatev1alpha1.Fence) *Refused {
	c := meta.FindStatusCondition(target.Status.Conditions, fencegatev1alpha1.ConditionEpochAccepted)
	if c == nil || c.Status != metav1.ConditionFalse || c.ObservedGeneration < p.Generation || (p.StaleRefusal != "" && c.Message == p.StaleRefusal) {
		return nil
	}
	name := clusterName(target)
	if c.Reason == fencegatev1alpha1.ReasonEpochStepTooLarge {
		return &Refused{Why: stepTooLarge(name, p.Epoch, fmt.Sprintf(", and %s goes on declaring epoch %d", name, target.Status.Epoch)), Message: c.Message}
	}
	return &Refused{Why: fmt.Sprintf("the fence authority does not accept epoch %d for %s (EpochAccepted False, %s); %s declares epoch %d", p.Epoch, name, c.Reason, name, target.Status.Epoch), Message: c.Message}
}

// stepTooLarge is the refusal of epoch for cluster as too large a step,
// with more said of it.
func stepTooLarge(cluster string, epoch uint64, more string) string {
	return fmt.Sprintf("the fence authority refuses epoch %d for %s as too far above the highest epoch of the domain (EPOCH_STEP_TOO_LARGE)%s: "+
		"run the failover again with a lower --epoch, or without one (one above the holder's epoch is enough)", epoch, cluster, more)
}

// refusal says why the target, which declares the new epoch, cannot take
// the fence as it is; nil while it may still.
func refusal(target *fencegatev1alpha1.Fence, epoch uint64) *Refused {
	st := target.Status
	msg := condition(target, fencegatev1alpha1.ConditionHolding).Message
	if r := cannotDeclare(target); r != nil {
		return r
	}
	switch {
	case st.State == string(fencestate.EpochRegressed):
		return &Refused{Why: fmt.Sprintf("%s is regressed: the authority has seen it declare a higher epoch than %d", clusterName(target), st.Epoch), Message: msg}
	case st.FenceReason == rpctypes.ReasonEpochStepTooLarge:
		return &Refused{Why: stepTooLarge(clusterName(target), epoch, ""), Message: msg}
	case st.State == string(fencestate.Fenced) && st.Holder != nil && st.Holder.Name != clusterName(target) && st.Holder.Epoch >= int64(epoch): //nolint:gosec // as above
		return &Refused{Why: fmt.Sprintf("%s holds the fence at epoch %d, not below the %d asked for: pass --epoch %d or more", st.Holder.Name, st.Holder.Epoch, epoch, st.Holder.Epoch+1), Message: msg}
	}
	return nil
}

// cannotDeclare says why the target cannot declare any epoch: its
// identity may not, its authority is unreachable or does not serve the
// fence protocol; nil when none of these holds.
func cannotDeclare(target *fencegatev1alpha1.Fence) *Refused {
	st := target.Status
	msg := condition(target, fencegatev1alpha1.ConditionHolding).Message
	switch {
	case st.FenceReason == rpctypes.ReasonPermissionDenied:
		return &Refused{Why: fmt.Sprintf("permission denied: the authority does not let %s's identity declare as %s", clusterName(target), clusterName(target)), Message: msg}
	case st.State == string(fencestate.Unknown) && (st.FenceReason == fencestate.ReasonAuthorityUnreachable || st.FenceReason == fencestate.ReasonLeaseExpired):
		return &Refused{Why: fmt.Sprintf("the authority is unreachable from %s", clusterName(target)), Message: msg}
	case st.State == string(fencestate.Unsupported):
		return &Refused{Why: fmt.Sprintf("%s's authority does not serve the fence protocol", clusterName(target)), Message: msg}
	}
	return nil
}

// fencedBy reports whether f says its cluster is fenced by holder.
func fencedBy(f *fencegatev1alpha1.Fence, holder string) bool {
	c := condition(f, fencegatev1alpha1.ConditionHolding)
	return c.Status == metav1.ConditionFalse && c.Reason == fencegatev1alpha1.ReasonClusterFenced && f.Status.Holder != nil && f.Status.Holder.Name == holder
}

func noneActive(instances []fencegatev1alpha1.FenceInstance) bool {
	for _, i := range instances {
		if i.State == string(fencestate.Active) {
			return false
		}
	}
	return true
}

func components(st fencegatev1alpha1.ClusterFenceStatus) string {
	if st.Components == nil {
		return "no Components"
	}
	return st.Components.Summary
}

// heldObjects counts the actuator objects a Fence says are held.
func heldObjects(st fencegatev1alpha1.ClusterFenceStatus) string {
	if st.Held == nil {
		return "0"
	}
	return fmt.Sprintf("%d", st.Held.Held)
}

func condition(f *fencegatev1alpha1.Fence, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(f.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{Status: metav1.ConditionUnknown, Reason: "NotReported", Message: "fencegate has not written this condition yet"}
}

// describeStatus says where one cluster stands, for a person.
func describeStatus(f *fencegatev1alpha1.Fence) string {
	st := f.Status
	if st.State == "" {
		return "nothing yet: fencegate has not written this Fence's status (is fencegate run up to date and running?)"
	}
	k := fencestate.Key{Status: fencestate.Status(st.State), Epoch: uint64(st.Epoch), Token: uint64(st.Token)} //nolint:gosec // written from uint64s
	if st.Holder != nil {
		k.Holder, k.HolderEpoch = st.Holder.Name, uint64(st.Holder.Epoch) //nolint:gosec // written from a uint64
	}
	var b strings.Builder
	b.WriteString(k.String())
	if st.Pending != nil {
		fmt.Fprintf(&b, ", takeover by %s@%d pending", st.Pending.Name, st.Pending.Epoch)
		if st.LeaseExpiresAt != nil {
			fmt.Fprintf(&b, " until %s at the latest", st.LeaseExpiresAt.UTC().Format("15:04:05"))
		}
	}
	for _, typ := range []string{fencegatev1alpha1.ConditionHolding, fencegatev1alpha1.ConditionEnforced} {
		c := condition(f, typ)
		fmt.Fprintf(&b, "\n      %s=%s (%s): %s", typ, c.Status, c.Reason, c.Message)
	}
	if c := meta.FindStatusCondition(st.Conditions, fencegatev1alpha1.ConditionEpochAccepted); c != nil && c.Status != metav1.ConditionTrue {
		fmt.Fprintf(&b, "\n      %s=%s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}
