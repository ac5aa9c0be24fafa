package fenceobject

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
)

// leaveTimeout bounds what an instance does on its way out: removing its
// entry and its Lease. Were it cut short, the leader prunes both once the
// Lease ends.
const leaveTimeout = 2 * time.Second

// holdPoll is the shortest wait between two looks at the agent's validity
// while this instance publishes a hold, or retries one.
const holdPoll = time.Second

// instance is the state of one replica's Instance runnable; only its
// goroutine uses it.
type instance struct {
	k *Keeper
	// applied is the entry last applied, to the Fence with UID appliedTo,
	// which then had resourceVersion appliedVersion.
	applied        *fencegatev1alpha1.FenceInstance
	appliedTo      types.UID
	appliedVersion string
	// hold is the hold this instance's Lease carries, and refreshAt when
	// it is to be written again if the agent's validity moved on.
	hold      membership.Hold
	refreshAt time.Time
	// retryHold is set while the hold last asked for could not be written.
	retryHold bool
	// failing names what failed last, so that a failure is logged once
	// until it heals.
	failing map[string]bool
}

func (k *Keeper) runInstance(ctx context.Context) error {
	o := k.opts
	changes := k.opts.Fence.Subscribe()
	if err := k.watchFence(ctx); err != nil {
		return err
	}
	events := k.events.instance
	i := &instance{k: k, failing: map[string]bool{}}
	renew := k.opts.Clock.NewTicker(k.member.lease.RenewInterval())
	defer renew.Stop()
	// The Lease comes first: the leader then counts this instance before
	// its entry says what it applies, and holds Enforced back until it
	// does.
	i.renewLease(ctx)
	var refresh clock.Timer
	for {
		i.sync(ctx)
		i.publishHold(ctx)
		if refresh != nil {
			refresh.Stop()
			refresh = nil
		}
		var refreshed <-chan time.Time
		if i.hold.Token != 0 || i.retryHold {
			// At most every holdPoll: a validity that did not move (the
			// authority does not answer) is looked at again then.
			refresh = o.Clock.NewTimer(max(i.refreshAt.Sub(o.Clock.Now()), holdPoll))
			refreshed = refresh.C()
		}
		select {
		case <-ctx.Done():
			i.leave()
			return nil
		case <-events:
		case <-changes:
		case <-refreshed:
		case <-renew.C():
			i.renewLease(ctx)
		}
	}
}

// publishHold makes this instance's Lease say what it holds (package gate
// reads it): the fencing token and the end of the agent's validity while
// the state is active, nothing otherwise. Heartbeats move the validity
// without a change of state; the hold is written again once half of the
// time it promised has passed, so that a reader sees it end only when the
// agent's validity does.
func (i *instance) publishHold(ctx context.Context) {
	now := i.k.opts.Clock.Now()
	hold, err := i.k.member.publish(ctx, i.k.opts.Fence, now, i.refreshAt)
	i.retryHold = !i.report("publish this instance's hold", err)
	switch {
	case i.retryHold:
		i.refreshAt = now
	case hold != i.hold:
		i.refreshAt = now.Add(hold.ValidUntil.Sub(now) / 2)
	}
	i.hold = hold
}

// sync brings this instance's entry in line with the fence state, and the
// enforced and quiesced gauges with the Fence.
func (i *instance) sync(ctx context.Context) {
	o := i.k.opts
	var f fencegatev1alpha1.Fence
	err := o.Client.Get(ctx, client.ObjectKey{Name: o.Domain}, &f)
	if apierrors.IsNotFound(err) {
		// Deleted by someone: EpochSync makes it again, and the event of
		// its creation brings the next sync.
		return
	}
	if !i.report("read the Fence", err) {
		return
	}
	if c := meta.FindStatusCondition(f.Status.Conditions, fencegatev1alpha1.ConditionEnforced); c != nil && c.Status == metav1.ConditionTrue {
		i.k.metrics.enforced.Set(1)
	} else {
		i.k.metrics.enforced.Set(0)
	}
	i.k.metrics.quiesced.Reset()
	if c := meta.FindStatusCondition(f.Status.Conditions, fencegatev1alpha1.ConditionQuiesced); c != nil {
		i.k.metrics.quiesced.WithLabelValues(string(c.Status), c.Reason).Set(1)
	}
	if state, ok := o.Fence.Fence(); ok {
		i.applyEntry(ctx, &f, state)
	}
}

// applyEntry applies this instance's entry of status.instances when the
// state it applies or the cluster generation its agent presents changed, or
// the entry is missing from f.
func (i *instance) applyEntry(ctx context.Context, f *fencegatev1alpha1.Fence, state fencestate.State) {
	o := i.k.opts
	want := EntryOf(o.Instance, state)
	if i.applied != nil && sameEntry(*i.applied, want) && i.appliedTo == f.UID && (i.appliedVersion == f.ResourceVersion || hasEntry(f, *i.applied)) {
		return
	}
	// Since stays while the state does: only the state's change is news.
	since := metav1.NewTime(o.Clock.Now().Truncate(time.Second))
	if i.applied != nil && sameState(*i.applied, want) && i.applied.Since != nil {
		since = *i.applied.Since
	}
	want.Since = &since
	status := fencegatev1alpha1.ClusterFenceStatus{Instances: []fencegatev1alpha1.FenceInstance{want}}
	if !i.report("apply this instance's entry", i.k.applyStatus(ctx, &status, instanceFieldManager(o.Instance))) {
		return
	}
	i.applied, i.appliedTo = &want, f.UID
	// The cache will show the object as applied; until then an older
	// version without the entry is no reason to apply again.
	var applied fencegatev1alpha1.Fence
	if err := o.Client.Get(ctx, client.ObjectKey{Name: o.Domain}, &applied); err == nil {
		i.appliedVersion = applied.ResourceVersion
	}
}

// hasEntry reports whether f holds e as this instance applied it.
func hasEntry(f *fencegatev1alpha1.Fence, e fencegatev1alpha1.FenceInstance) bool {
	for _, got := range f.Status.Instances {
		if got.Name == e.Name {
			return sameEntry(got, e)
		}
	}
	return false
}

// renewLease makes or renews this instance's Lease. One made anew (the
// leader deleted it after it ended: this process stalled) has the entry
// applied again, since the leader pruned it too.
func (i *instance) renewLease(ctx context.Context) {
	made, err := i.k.member.renew(ctx)
	if i.report("keep this instance's Lease", err) && made {
		i.applied = nil
	}
}

// leave removes this instance's entry and Lease, so that the leader does
// not wait for a replica that stopped.
func (i *instance) leave() {
	o := i.k.opts
	ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
	defer cancel()
	if i.applied != nil {
		// Applying no entry under this instance's field manager removes
		// the one it applied.
		err := i.k.applyStatus(ctx, &fencegatev1alpha1.ClusterFenceStatus{Instances: []fencegatev1alpha1.FenceInstance{}}, instanceFieldManager(o.Instance))
		i.report("remove this instance's entry", err)
	}
	i.report("delete this instance's Lease", i.k.member.release(ctx))
}

// report logs err once until what failed works again, and says whether it
// worked.
func (i *instance) report(what string, err error) bool {
	return reportOnce(i.k.opts, i.failing, what, err)
}

// reportOnce logs err once until what failed works again (failing keeps
// what fails now), and says whether it worked.
func reportOnce(o Options, failing map[string]bool, what string, err error) bool {
	switch {
	case err != nil && !failing[what]:
		failing[what] = true
		o.Logger.Error(err, "fence object: "+what+" failed; retrying on the next change", "fence", o.Domain, "instance", o.Instance)
	case err == nil && failing[what]:
		delete(failing, what)
		o.Logger.Info("fence object: "+what+" works again", "fence", o.Domain, "instance", o.Instance)
	}
	return err == nil
}
