package fenceobject

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/internal/runnable"
	"github.com/fencegate/fencegate/internal/ssa"
)

// Keeper keeps one domain's Fence object in this cluster: its Instance
// runs on every replica, its Status on the elected leader.
type Keeper struct {
	opts    Options
	metrics *metrics
	// instanceChanges and statusChanges hear every change of the fence
	// state, each for one of the two runnables.
	instanceChanges, statusChanges <-chan struct{}
}

// New checks opts and returns a Keeper. It subscribes to opts.Changes,
// which must not have started yet.
func New(opts Options) (*Keeper, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Keeper{
		opts:            opts,
		metrics:         m,
		instanceChanges: opts.SubscribeChanges(),
		statusChanges:   opts.SubscribeChanges(),
	}, nil
}

// Instance is the runnable of every replica (see the package comment).
func (k *Keeper) Instance() manager.Runnable { return runnable.EveryReplica(k.runInstance) }

// Status is the runnable of the elected leader (see the package comment).
func (k *Keeper) Status() manager.Runnable { return manager.RunnableFunc(k.runStatus) }

// applyStatus applies status (what one field manager owns of it) to the
// domain's Fence.
func (k *Keeper) applyStatus(ctx context.Context, status any, manager string) error {
	return ssa.ApplyStatus(ctx, k.opts.Client, fencegatev1alpha1.GroupVersion.WithKind("Fence"), client.ObjectKey{Name: k.opts.Domain}, status, manager)
}
