package fenceobject

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/notify"
)

// leaveTimeout bounds what an instance does on its way out: removing its
// entry and its Lease. Were it cut short, the leader prunes both once the
// Lease ends.
const leaveTimeout = 2 * time.Second

// instance is the state of one replica's Instance runnable; only its
// goroutine uses it.
type instance struct {
	k *Keeper
	// lease is this instance's Lease.
	lease *membership.Lease
	// applied is the entry last applied, to the Fence with UID appliedTo,
	// which then had resourceVersion appliedVersion.
	applied        *fencegatev1alpha1.FenceInstance
	appliedTo      types.UID
	appliedVersion string
	// failing names what failed last, so that a failure is logged once
	// until it heals.
	failing map[string]bool
}

func (k *Keeper) runInstance(ctx context.Context) error {
	changes := k.opts.Fence.Subscribe()
	events := notify.New()
	if err := k.watch(ctx, &fencegatev1alpha1.Fence{}, events); err != nil {
		return err
	}
	i := &instance{k: k, lease: membership.NewLease(k.membership()), failing: map[string]bool{}}
	renew := k.opts.Clock.NewTicker(i.lease.RenewInterval())
	defer renew.Stop()
	// The Lease comes first: the leader then counts this instance before
	// its entry says what it applies, and holds Enforced back until it
	// does.
	i.renewLease(ctx)
	for {
		i.sync(ctx)
		select {
		case <-ctx.Done():
			i.leave()
			return nil
		case <-events:
		case <-changes:
		case <-renew.C():
			i.renewLease(ctx)
		}
	}
}

// sync brings this instance's entry in line with the fence state, and the
// enforced gauge with the Fence.
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
	made, err := i.lease.Renew(ctx)
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
	i.report("delete this instance's Lease", i.lease.Release(ctx))
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
