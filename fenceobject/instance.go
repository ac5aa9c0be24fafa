package fenceobject

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
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
	// lease is this instance's Lease as last written; nil until created.
	lease *coordinationv1.Lease
	// applied is the entry last applied, to the Fence with UID appliedTo,
	// which then had resourceVersion appliedVersion.
	applied        *fencegatev1alpha1.FenceInstance
	appliedTo      types.UID
	appliedVersion string
	// epoch is the epoch last handed to the agent.
	epoch uint64
	// failing names what failed last, so that a failure is logged once
	// until it heals.
	failing map[string]bool
}

func (k *Keeper) runInstance(ctx context.Context) error {
	events := notify.New()
	if err := watch(ctx, k.opts.Cache, &fencegatev1alpha1.Fence{}, events); err != nil {
		return err
	}
	i := &instance{k: k, failing: map[string]bool{}}
	renew := k.opts.Clock.NewTicker(k.opts.LeaseDuration / 3)
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
		case <-k.instanceChanges:
		case <-renew.C():
			i.renewLease(ctx)
		}
	}
}

// sync brings the agent and this instance's entry in line with the Fence
// and the fence state.
func (i *instance) sync(ctx context.Context) {
	o := i.k.opts
	state, haveState := o.Fence()
	var f fencegatev1alpha1.Fence
	err := o.Client.Get(ctx, client.ObjectKey{Name: o.Domain}, &f)
	if apierrors.IsNotFound(err) {
		// Deleted by someone: made again, never below the epoch the
		// agent declares. The event of its creation brings the next sync.
		_, err = ensure(ctx, o.Client, o.Client, o.Domain, recreatedSpec(o.FloorEpoch, state, haveState))
		i.report("create the Fence", err)
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
	i.followFence(ctx, &f, state, haveState)
	if haveState {
		i.applyEntry(ctx, &f, state)
	}
}

// followFence hands the agent what the Fence asks of it: the cluster
// generation the leader last wrote (so that a process cut off for a while
// presents the current one), and the epoch max(--epoch, spec.epoch) when it
// changed. An epoch below the one the agent declares (state) is not handed
// over: the agent refuses to lower it, and the leader's EpochAccepted
// condition says why. One refused for its step with none accepted before
// (stepRefused) is no such floor: it was never recorded, and the agent
// takes a lower epoch, so that lowering a typo in spec.epoch fixes it
// without a restart.
func (i *instance) followFence(ctx context.Context, f *fencegatev1alpha1.Fence, state fencestate.State, haveState bool) {
	o := i.k.opts
	if f.Status.ClusterGeneration > 0 {
		o.Agent.AdoptClusterGeneration(uint64(f.Status.ClusterGeneration))
	}
	target := TargetEpoch(o.FloorEpoch, f)
	if target == i.epoch {
		i.report("declare spec.epoch", nil)
		return
	}
	if haveState && target < state.Cluster.Epoch && !stepRefused(state) {
		i.report("declare spec.epoch", fmt.Errorf("the epoch the Fence asks for, %d (max(--epoch, spec.epoch)), is below epoch %d that this cluster declares: an epoch only rises, so it goes on declaring %d", target, state.Cluster.Epoch, state.Cluster.Epoch))
		return
	}
	if err := o.Agent.SetEpoch(ctx, target); i.report("declare spec.epoch", err) {
		if i.epoch != 0 {
			o.Logger.Info("declaring the epoch of the Fence's spec.epoch", "fence", o.Domain, "epoch", target, "previousEpoch", i.epoch, "floor", o.FloorEpoch)
		}
		i.epoch = target
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

// renewLease creates this instance's Lease, or renews it. A Lease that is
// gone (the leader deleted it after it ended: this process stalled) is made
// anew, and the entry applied again, since the leader pruned it too.
func (i *instance) renewLease(ctx context.Context) {
	o := i.k.opts
	now := metav1.NewMicroTime(o.Clock.Now())
	if i.lease != nil {
		i.lease.Spec.RenewTime = &now
		err := o.Client.Update(ctx, i.lease)
		switch {
		case err == nil:
			i.report("renew this instance's Lease", nil)
			return
		case apierrors.IsConflict(err):
			// Someone else wrote it: take its version, renew next time.
			var fresh coordinationv1.Lease
			if o.Client.Get(ctx, client.ObjectKeyFromObject(i.lease), &fresh) == nil {
				i.lease.ResourceVersion = fresh.ResourceVersion
			}
			return
		case !apierrors.IsNotFound(err):
			i.report("renew this instance's Lease", err)
			return
		}
	}
	lease := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: o.Namespace, Name: leaseName(o.Domain, o.Instance), Labels: map[string]string{LabelDomain: o.Domain}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(o.Instance),
			LeaseDurationSeconds: ptr.To(int32(o.LeaseDuration / time.Second)),
			AcquireTime:          &now,
			RenewTime:            &now,
		},
	}
	err := o.Client.Create(ctx, lease)
	if apierrors.IsAlreadyExists(err) {
		// Left by an earlier run under the same instance name.
		var old coordinationv1.Lease
		if err = o.Client.Get(ctx, client.ObjectKeyFromObject(lease), &old); err == nil {
			lease.ResourceVersion = old.ResourceVersion
			err = o.Client.Update(ctx, lease)
		}
	}
	if !i.report("create this instance's Lease", err) {
		return
	}
	i.lease, i.applied = lease, nil
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
	if i.lease != nil {
		err := client.IgnoreNotFound(o.Client.Delete(ctx, i.lease))
		i.report("delete this instance's Lease", err)
	}
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
