package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
)

// HeldRequeue is how often a held Component is looked at again even without
// a fence transition, as a safety net for a missed signal.
const HeldRequeue = 15 * time.Minute

// Policy answers the reconciler's questions; the policy engine implements it.
type Policy interface {
	// Reconcile evaluates data.fencegate.reconcile.decision for a Component.
	Reconcile(ctx context.Context, component map[string]any) (engine.ReconcileDecision, error)
}

// Reconciler writes each Component's fence conditions.
type Reconciler struct {
	client  client.Client
	policy  Policy
	source  fencestate.Source
	clock   clock.PassiveClock
	metrics *metrics
	events  *eventRecorder
	marks   *Marks
}

// Marks tells how far the controller got in re-marking the Components for
// the latest fence state, and how many are held.
func (r *Reconciler) Marks() *Marks { return r.marks }

// Reconcile brings one Component's status in line with the policies'
// decision. It writes only when the status differs, and then applies only
// the fields fencegate owns (applyStatus), so that an actuator's fields are
// never overwritten and never conflict.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, err error) {
	log := logr.FromContextOrDiscard(ctx)

	gen := r.marks.generation()
	var comp fencegatev1alpha1.Component
	if err := r.client.Get(ctx, req.NamespacedName, &comp); err != nil {
		if apierrors.IsNotFound(err) {
			r.metrics.held.Set(float64(r.marks.gone(req.NamespacedName)))
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get component %s: %w", req.NamespacedName, err)
	}
	// A Component being deleted is its owners' business; a status write
	// would only race their finalizers.
	if !comp.DeletionTimestamp.IsZero() {
		r.metrics.held.Set(float64(r.marks.gone(req.NamespacedName)))
		return reconcile.Result{}, nil
	}

	input, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&comp)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("convert component %s for the policies: %w", req.NamespacedName, err)
	}
	before := r.fence()
	decision, err := r.policy.Reconcile(ctx, input)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("evaluate reconcile policy for %s: %w", req.NamespacedName, err)
	}
	fence := r.fence()

	desired := Desired(&comp, decision, fence, r.clock.Now())
	if decision.Hold {
		result.RequeueAfter = HeldRequeue
	}
	// The Component is marked once its status says what the decision
	// says: already, or after the write below.
	mark := func() {
		r.metrics.held.Set(float64(r.marks.marked(req.NamespacedName, gen, before.Key(), fence.Key(), decision.Hold)))
	}
	if equality.Semantic.DeepEqual(comp.Status, desired) {
		mark()
		return result, nil
	}

	conflictBefore := sourceConflict(comp.Status)
	if err := r.removeSharedConditions(ctx, &comp, desired); err != nil {
		return reconcile.Result{}, err
	}
	status, err := applyStatus(&comp, desired, decision.Hold)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("status of component %s: %w", req.NamespacedName, err)
	}
	if err := r.client.Status().Apply(ctx, status, client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return reconcile.Result{}, fmt.Errorf("apply status of component %s: %w", req.NamespacedName, err)
	}
	mark()
	if after := sourceConflict(desired); after != conflictBefore {
		r.events.fenceChanged(&comp, decision)
	}
	log.V(1).Info("wrote fence conditions", "hold", decision.Hold, "reason", decision.Reason)
	return result, nil
}

// fence is the fence state the policies see now; unknown before the agent
// wrote one.
func (r *Reconciler) fence() fencestate.State {
	fence, ok := r.source.Fence()
	if !ok {
		fence.Status = fencestate.Unknown
	}
	return fence
}

// sourceConflict returns the SourceConflict condition's status and reason.
func sourceConflict(status fencegatev1alpha1.ComponentStatus) string {
	if c := meta.FindStatusCondition(status.Conditions, fencegatev1alpha1.ConditionSourceConflict); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

// Options configure the controller.
type Options struct {
	// Policy answers the reconcile question; the policy engine in production.
	Policy Policy
	// Fence is the fence state the policies decide from; each of its
	// changes re-enqueues every Component.
	Fence fencestate.Source
	// MaxConcurrentReconciles bounds parallel status writes (default 8).
	MaxConcurrentReconciles int
	// EventsPerSecond and EventBurst bound the Kubernetes Events recorded
	// for Components whose fence condition changes, across all Components
	// (defaults 5 and 50): a transition re-marks every Component, and one
	// event each would flood the API server.
	EventsPerSecond float64
	EventBurst      int
	// Registerer takes the controller's metrics; nil leaves them
	// unregistered.
	Registerer prometheus.Registerer
	// Clock is injected by tests; nil means the real clock.
	Clock clock.PassiveClock
}

// SetupWithManager registers the Component controller with mgr.
func SetupWithManager(mgr ctrl.Manager, opts Options) (*Reconciler, error) {
	if opts.Policy == nil || opts.Fence == nil {
		return nil, errors.New("controller needs a policy to ask and the fence state it decides from")
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = 8
	}
	if opts.EventsPerSecond <= 0 {
		opts.EventsPerSecond = 5
	}
	if opts.EventBurst <= 0 {
		opts.EventBurst = 50
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	r := &Reconciler{
		client:  mgr.GetClient(),
		policy:  opts.Policy,
		source:  opts.Fence,
		clock:   opts.Clock,
		metrics: m,
		events:  newEventRecorder(mgr.GetEventRecorder("fencegate-controller"), opts.EventsPerSecond, opts.EventBurst, m),
		marks:   NewMarks(),
	}
	err = ctrl.NewControllerManagedBy(mgr).
		For(&fencegatev1alpha1.Component{}).
		Named("component").
		WithOptions(ctrlcontroller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		WatchesRawSource(enqueueAllOn(opts.Fence.Subscribe(), mgr.GetClient(), r.fence, r.marks)).
		Complete(r)
	if err != nil {
		return nil, fmt.Errorf("set up component controller: %w", err)
	}
	return r, nil
}
