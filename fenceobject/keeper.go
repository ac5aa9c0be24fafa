package fenceobject

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/internal/runnable"
	"github.com/fencegate/fencegate/internal/ssa"
)

// Keeper keeps one domain's Fence object in this cluster: its Instance and
// EpochSync run on every replica, its Status on the elected leader.
type Keeper struct {
	opts    Options
	metrics *metrics
	// member is this instance's membership Lease.
	member *memberLease
	// events signal the Keeper's loops of changes to its Fence and Leases.
	events *loopEvents
}

// New checks opts and returns a Keeper.
func New(opts Options) (*Keeper, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	k := &Keeper{opts: opts, metrics: m, events: newLoopEvents()}
	k.member = &memberLease{lease: membership.NewLease(k.membership())}
	return k, nil
}

// Runnables are the Keeper's runnables, for the manager: Instance and
// EpochSync on every replica, Status on the leader.
func (k *Keeper) Runnables() []manager.Runnable {
	return []manager.Runnable{
		runnable.EveryReplica(k.runInstance),
		runnable.EveryReplica(k.runEpochSync),
		manager.RunnableFunc(k.runStatus),
	}
}

// membership is where the domain's instances keep their Leases.
func (k *Keeper) membership() membership.Config {
	o := k.opts
	return membership.Config{Client: o.Client, Namespace: o.Namespace, Domain: o.Domain, Instance: o.Instance, Duration: o.LeaseDuration, Clock: o.Clock}
}

// applyStatus applies status (what one field manager owns of it) to the
// domain's Fence.
func (k *Keeper) applyStatus(ctx context.Context, status any, manager string) error {
	return ssa.ApplyStatus(ctx, k.opts.Client, fencegatev1alpha1.GroupVersion.WithKind("Fence"), client.ObjectKey{Name: k.opts.Domain}, status, manager)
}
