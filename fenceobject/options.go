package fenceobject

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/internal/notify"
)

// Options are what Instance, EpochSync and Status share.
type Options struct {
	// Client reads from the manager's cache (see CacheOptions) and writes
	// to the API server.
	Client client.Client
	// Cache delivers the events of the Fence and the instances' Leases.
	Cache cache.Cache
	// Domain is the fence domain, the Fence's name.
	Domain string
	// Namespace holds the instances' Leases.
	Namespace string
	// Instance is this process's name within its cluster, as the agent
	// declares it.
	Instance string
	// FloorEpoch is the epoch fencegate was started with (--epoch): the
	// floor below spec.epoch.
	FloorEpoch uint64
	// Fence is the fence state this process's policies see: what its
	// webhook answers from.
	Fence fencestate.Source
	// Agent takes the epoch to declare when spec.epoch changes, and the
	// cluster generation the Fence's status keeps.
	Agent Agent

	// Authority tells of a pending takeover (GetFence), asked by the leader
	// on every change of the fence state.
	Authority fencev1.FenceServiceClient
	// Policy gives the conditions' messages.
	Policy Policy
	// Marks tells how far the controller got in marking the Components.
	Marks Marks
	// Holds tells how far the hold controller got in holding the
	// actuators' objects; nil when no kinds are held.
	Holds Holds

	// LeaseDuration is how long an instance's Lease lasts; 0 means
	// membership.DefaultDuration.
	LeaseDuration time.Duration
	// HandoverQuietWait bounds how long AwaitHandover waits, once every
	// held object is held, for them all to go quiet; 0 means
	// DefaultHandoverQuietWait.
	HandoverQuietWait time.Duration
	// Clock is the source of time; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives what goes wrong.
	Logger logr.Logger
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// Agent is the fence agent of this process.
type Agent interface {
	// SetEpoch makes the agent declare epoch from now on; an epoch only
	// rises, but for one the authority refused for its step, which may be
	// lowered back to the last accepted one or above (to any, when none was
	// accepted).
	SetEpoch(ctx context.Context, epoch uint64) error
	// AdoptClusterGeneration makes the agent present generation g of its
	// cluster from its next declaration on, if g is newer than its own.
	AdoptClusterGeneration(g uint64)
}

// Policy answers what the policies say of the fence state; the policy
// engine implements it.
type Policy interface {
	Reconcile(ctx context.Context, domain string, component map[string]any) (engine.ReconcileDecision, error)
}

// Marks is the controller's progress in marking the Components.
type Marks interface {
	Progress() controller.MarkProgress
	Changes() <-chan struct{}
}

// Holds is the hold controller's progress, per domain.
type Holds interface {
	Progress(domain string) hold.Progress
	Changes(domain string) <-chan struct{}
}

func (o Options) withDefaults() (Options, error) {
	if o.LeaseDuration == 0 {
		o.LeaseDuration = membership.DefaultDuration
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.HandoverQuietWait == 0 {
		o.HandoverQuietWait = DefaultHandoverQuietWait
	}
	var errs []error
	if o.Client == nil || o.Cache == nil {
		errs = append(errs, errors.New("no Kubernetes client or cache: pass the manager's"))
	}
	if o.Fence == nil || o.Agent == nil {
		errs = append(errs, errors.New("no fence state or agent: pass the fence state the policies see and the agent that declares it"))
	}
	if o.Authority == nil || o.Policy == nil || o.Marks == nil {
		errs = append(errs, errors.New("no authority client, policy or marks: the leader derives the status from them"))
	}
	if o.Domain == "" || o.Namespace == "" || o.Instance == "" {
		errs = append(errs, fmt.Errorf("domain %q, namespace %q and instance %q must all be set", o.Domain, o.Namespace, o.Instance))
	}
	if err := membership.CheckDuration(o.LeaseDuration); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("fence object options: %w", errors.Join(errs...))
	}
	return o, nil
}

// CacheOptions narrows the manager's cache to what the Keepers of domains
// read: those domains' Fences, and the instances' Leases of those domains
// in namespace.
func CacheOptions(domains []string, namespace string) (map[client.Object]cache.ByObject, error) {
	fences := cache.ByObject{}
	if len(domains) == 1 {
		// One Fence is read by name, which RBAC can grant by name.
		fences.Field = fields.OneTermEqualSelector("metadata.name", domains[0])
	}
	inDomains, err := labels.NewRequirement(membership.LabelDomain, selection.In, domains)
	if err != nil {
		return nil, fmt.Errorf("fence domains %v as a label selector: %w", domains, err)
	}
	return map[client.Object]cache.ByObject{
		&fencegatev1alpha1.Fence{}: fences,
		&coordinationv1.Lease{}: {
			Namespaces: map[string]cache.Config{namespace: {}},
			Label:      labels.NewSelector().Add(*inDomains),
		},
	}, nil
}

// loopEvents are the signals of the Keeper's loops. One handler on the
// Fences' informer signals all three loops that follow the Fence, added by
// the first of them to start: client-go runs two goroutines and a buffer
// for every handler, and a handler per loop made three of each per served
// domain. The replay of the cached Fence that client-go sends a handler
// when it is added signals all three, as each loop's own handler's did.
type loopEvents struct {
	// instance, epoch and status are the Instance, EpochSync and Status
	// loops' signals; Status's also hears the instances' Leases.
	instance, epoch, status chan struct{}

	mu           sync.Mutex
	fenceWatched bool
}

func newLoopEvents() *loopEvents {
	return &loopEvents{instance: notify.New(), epoch: notify.New(), status: notify.New()}
}

// watchFence makes the Keeper's Fence signal its loops, once.
func (k *Keeper) watchFence(ctx context.Context) error {
	e := k.events
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fenceWatched {
		return nil
	}
	if err := k.watch(ctx, &fencegatev1alpha1.Fence{}, e.instance, e.epoch, e.status); err != nil {
		return err
	}
	e.fenceWatched = true
	return nil
}

// watch signals every one of events on every change in the cache of an
// object of obj's kind that belongs to the Keeper's domain: its Fence, or
// its instances' Leases.
func (k *Keeper) watch(ctx context.Context, obj client.Object, events ...chan<- struct{}) error {
	inf, err := k.opts.Cache.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("watch %T: %w", obj, err)
	}
	signal := func(o any) {
		if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = tomb.Obj
		}
		if o, ok := o.(client.Object); ok && k.ofDomain(o) {
			for _, ch := range events {
				notify.Signal(ch)
			}
		}
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    signal,
		UpdateFunc: func(_, o any) { signal(o) },
		DeleteFunc: signal,
	})
	if err != nil {
		return fmt.Errorf("watch %T: %w", obj, err)
	}
	return nil
}

// ofDomain says whether o is the Keeper's Fence or one of its domain's
// instance Leases.
func (k *Keeper) ofDomain(o client.Object) bool {
	if _, ok := o.(*fencegatev1alpha1.Fence); ok {
		return o.GetName() == k.opts.Domain
	}
	return o.GetLabels()[membership.LabelDomain] == k.opts.Domain
}
