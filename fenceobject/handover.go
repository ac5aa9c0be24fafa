package fenceobject

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fencestate"
)

// DefaultHandoverQuietWait is how long, once every held object is held, a
// handover waits for them all to go quiet before the fence is released.
// An actuator sees its object suspended a watch event after the patch; a
// CronJob, KEDA or Argo CD gives no mark of having seen it, and counts as
// quiet only after --hold-quiet-for, longer than a lease leaves.
const DefaultHandoverQuietWait = 2 * time.Second

// handoverPoll is how often AwaitHandover reads the Fence from the cache.
const handoverPoll = 50 * time.Millisecond

// AwaitHandover is the fence agent's AwaitHandover
// (fenceagent.Options.AwaitHandover): it returns once the Fence, as the
// leader wrote it for the fenced state (a non-active state naming the
// same holder at its epoch or above), says that this cluster's actuators
// are held: Quiesced True, Quiesced Unknown for NoHeldKinds, or NotQuiet
// (every object decided and held, some not yet quiet) for
// HandoverQuietWait. Every replica waits on the leader's word, so that no
// replica's release lets the cluster taking over resume early. It returns
// ctx's error, saying where the holds stand, when ctx ends first.
func (k *Keeper) AwaitHandover(ctx context.Context, fenced fencestate.State) error {
	o := k.opts
	ticker := o.Clock.NewTicker(handoverPoll)
	defer ticker.Stop()
	var heldSince time.Time
	var last string
	for {
		var f fencegatev1alpha1.Fence
		err := o.Client.Get(ctx, client.ObjectKey{Name: o.Domain}, &f)
		if err != nil {
			last = fmt.Sprintf("read the Fence: %v", err)
		} else {
			held, quiet, why := handoverStanding(&f, fenced)
			last = why
			switch {
			case held && quiet:
				return nil
			case held && heldSince.IsZero():
				heldSince = o.Clock.Now()
			case held && o.Clock.Since(heldSince) >= o.HandoverQuietWait:
				o.Logger.Info("fence released before every held object went quiet", "quietWait", o.HandoverQuietWait.String(), "holds", why)
				return nil
			case !held:
				heldSince = time.Time{}
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("actuators not held: %s: %w", last, ctx.Err())
		case <-ticker.C():
		}
	}
}

// handoverStanding reads from f whether this cluster's actuators are held
// for the fenced state, and quiet, and says why for a person.
func handoverStanding(f *fencegatev1alpha1.Fence, fenced fencestate.State) (held, quiet bool, why string) {
	st := f.Status
	switch {
	case st.State == "" || st.State == string(fencestate.Active):
		return false, false, fmt.Sprintf("the leader's fence state is %q, not yet the fenced one", st.State)
	case st.Holder == nil || st.Holder.Name != fenced.Holder.Name || st.Holder.Epoch < int64(fenced.Holder.Epoch): //nolint:gosec // epochs are far below 2^63
		return false, false, "the leader has not yet seen the cluster taking over"
	}
	c := meta.FindStatusCondition(st.Conditions, fencegatev1alpha1.ConditionQuiesced)
	switch {
	case c == nil:
		return false, false, "no Quiesced condition yet"
	case c.Reason == fencegatev1alpha1.ReasonQuiesced && c.Status == metav1.ConditionTrue,
		c.Reason == fencegatev1alpha1.ReasonNoHeldKinds:
		return true, true, c.Message
	case c.Reason == fencegatev1alpha1.ReasonNotQuiet:
		return true, false, c.Message
	default:
		return false, false, c.Message
	}
}
