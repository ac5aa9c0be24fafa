package fenceobject

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fencestate"
)

// epochSync is the state of one replica's EpochSync runnable; only its
// goroutine uses it.
type epochSync struct {
	k *Keeper
	// epoch is the epoch last handed to the agent.
	epoch uint64
	// failing names what failed last, so that a failure is logged once
	// until it heals.
	failing map[string]bool
}

func (k *Keeper) runEpochSync(ctx context.Context) error {
	changes := k.opts.Fence.Subscribe()
	if err := k.watchFence(ctx); err != nil {
		return err
	}
	events := k.events.epoch
	e := &epochSync{k: k, failing: map[string]bool{}}
	for {
		e.sync(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-events:
		case <-changes:
		}
	}
}

// sync brings the agent in line with the Fence, and makes the Fence again
// when someone deleted it.
func (e *epochSync) sync(ctx context.Context) {
	o := e.k.opts
	state, haveState := o.Fence.Fence()
	var f fencegatev1alpha1.Fence
	err := o.Client.Get(ctx, client.ObjectKey{Name: o.Domain}, &f)
	if apierrors.IsNotFound(err) {
		// Deleted by someone: made again, never below the epoch the
		// agent declares. The event of its creation brings the next sync.
		_, err = ensure(ctx, o.Client, o.Client, o.Domain, recreatedSpec(o.FloorEpoch, state, haveState))
		e.report("create the Fence", err)
		return
	}
	if e.report("read the Fence", err) {
		e.follow(ctx, &f, state, haveState)
	}
}

// follow hands the agent what the Fence asks of it: the cluster generation
// the leader last wrote (so that a process cut off for a while presents the
// current one), and the epoch max(--epoch, spec.epoch) when it changed. An
// epoch below the one the agent declares (state) is not handed over: the
// agent refuses to lower it, and the leader's EpochAccepted condition says
// why. One refused for its step with none accepted before (stepRefused) is
// no such floor: it was never recorded, and the agent takes a lower epoch,
// so that lowering a typo in spec.epoch fixes it without a restart.
func (e *epochSync) follow(ctx context.Context, f *fencegatev1alpha1.Fence, state fencestate.State, haveState bool) {
	o := e.k.opts
	if f.Status.ClusterGeneration > 0 {
		o.Agent.AdoptClusterGeneration(uint64(f.Status.ClusterGeneration))
	}
	target := TargetEpoch(o.FloorEpoch, f)
	if target == e.epoch {
		e.report("declare spec.epoch", nil)
		return
	}
	if haveState && target < state.Cluster.Epoch && !stepRefused(state) {
		e.report("declare spec.epoch", fmt.Errorf("the epoch the Fence asks for, %d (max(--epoch, spec.epoch)), is below epoch %d that this cluster declares: an epoch only rises, so it goes on declaring %d", target, state.Cluster.Epoch, state.Cluster.Epoch))
		return
	}
	if err := o.Agent.SetEpoch(ctx, target); e.report("declare spec.epoch", err) {
		if e.epoch != 0 {
			o.Logger.Info("declaring the epoch of the Fence's spec.epoch", "fence", o.Domain, "epoch", target, "previousEpoch", e.epoch, "floor", o.FloorEpoch)
		}
		e.epoch = target
	}
}

// report logs err once until what failed works again, and says whether it
// worked.
func (e *epochSync) report(what string, err error) bool {
	return reportOnce(e.k.opts, e.failing, what, err)
}

// TargetEpoch is the epoch a cluster declares: spec.epoch when it is above
// floor, the epoch fencegate was started with, and floor otherwise.
func TargetEpoch(floor uint64, f *fencegatev1alpha1.Fence) uint64 {
	if f != nil && f.Spec.Epoch != nil && *f.Spec.Epoch > 0 && uint64(*f.Spec.Epoch) > floor {
		return uint64(*f.Spec.Epoch)
	}
	return floor
}

// Ensure returns the domain's Fence, read through r, and creates it with
// spec.epoch unset when it is missing. It never changes an existing Fence:
// spec belongs to the operator. fencegate run calls it before its agent
// starts, so that the first declaration is already at spec.epoch: a
// restarted process that declared its lower --epoch first would be
// refused as a restored cluster (epoch_regressed) for a moment.
func Ensure(ctx context.Context, c client.Writer, r client.Reader, domain string) (*fencegatev1alpha1.Fence, error) {
	return ensure(ctx, c, r, domain, fencegatev1alpha1.FenceSpec{})
}

// ensure is Ensure creating a missing Fence with spec.
func ensure(ctx context.Context, c client.Writer, r client.Reader, domain string, spec fencegatev1alpha1.FenceSpec) (*fencegatev1alpha1.Fence, error) {
	var f fencegatev1alpha1.Fence
	err := r.Get(ctx, client.ObjectKey{Name: domain}, &f)
	if apierrors.IsNotFound(err) {
		f = fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: domain}, Spec: spec}
		err = c.Create(ctx, &f)
		if apierrors.IsAlreadyExists(err) {
			// Another replica created it first.
			err = r.Get(ctx, client.ObjectKey{Name: domain}, &f)
		}
	}
	if err != nil {
		return nil, explain(err, domain)
	}
	return &f, nil
}

// recreatedSpec is the spec of a Fence made again by a running process
// whose agent is in state (when it has one) and was started with floor:
// spec.epoch is the epoch the agent declares when that is above floor.
// The only-rise rule checks updates only, so without it deleting the
// Fence would lower the epoch asked for below the one the authority
// accepted, and the cluster's next processes would declare less than it
// once did (epoch_regressed). An epoch refused for its step with none
// accepted before (stepRefused) was never recorded: the Fence is made
// without it, so that deleting a Fence whose typo cannot be lowered (no
// status.epoch yet) undoes the typo.
func recreatedSpec(floor uint64, state fencestate.State, ok bool) fencegatev1alpha1.FenceSpec {
	if !ok || state.Cluster.Epoch <= floor || stepRefused(state) {
		return fencegatev1alpha1.FenceSpec{}
	}
	return fencegatev1alpha1.FenceSpec{Epoch: ptr.To(int64(state.Cluster.Epoch))} //nolint:gosec // epochs are far below 2^63
}

// explain says what to do about an error reading or creating the Fence.
func explain(err error, domain string) error {
	switch {
	case meta.IsNoMatchError(err):
		return fmt.Errorf("the Fence resource (fences.components.fencegate.dev) is not installed on this cluster: apply the CRDs of this release (kubectl apply -f charts/fencegate/crds/); helm installs crds/ on install only, not on upgrade: %w", err)
	case apierrors.IsForbidden(err):
		return fmt.Errorf("fencegate may not read or create the Fence %q: grant its service account get, list, watch and create on fences and patch on fences/status (the chart's ClusterRole does): %w", domain, err)
	}
	return fmt.Errorf("get or create the Fence %q: %w", domain, err)
}
