package fenceobject

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
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
		instanceChanges: opts.Changes.Subscribe(),
		statusChanges:   opts.Changes.Subscribe(),
	}, nil
}

// Instance is the runnable of every replica (see the package comment).
func (k *Keeper) Instance() manager.Runnable { return everyReplica(k.runInstance) }

// Status is the runnable of the elected leader (see the package comment).
func (k *Keeper) Status() manager.Runnable { return manager.RunnableFunc(k.runStatus) }

// everyReplica is a runnable that needs no leadership.
type everyReplica func(ctx context.Context) error

func (f everyReplica) Start(ctx context.Context) error { return f(ctx) }

// NeedLeaderElection tells the manager to run it on every replica.
func (everyReplica) NeedLeaderElection() bool { return false }

// applyStatus applies status (what one field manager owns of it) to the
// domain's Fence.
func (k *Keeper) applyStatus(ctx context.Context, status any, manager string) error {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return fmt.Errorf("encode the Fence status to apply: %w", err)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{"status": u}}
	obj.SetGroupVersionKind(fencegatev1alpha1.GroupVersion.WithKind("Fence"))
	obj.SetName(k.opts.Domain)
	if err := k.opts.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of Fence %q as %s: %w", k.opts.Domain, manager, err)
	}
	return nil
}
