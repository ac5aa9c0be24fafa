package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/marks"
)

// HeldRequeue is how often a held Component is looked at again even without
// a fence transition, as a safety net for a missed signal.
const HeldRequeue = 15 * time.Minute

// Policy answers the reconciler's questions; the policy engine implements it.
type Policy interface {
	// DomainOf returns the fence domain of an object in namespace whose
	// domain.Label is label ("" for none).
	DomainOf(ctx context.Context, namespace, label string) (string, error)
	// Reconcile evaluates data.fencegate.reconcile.decision for a
	// Component of domain.
	Reconcile(ctx context.Context, domain string, component map[string]any) (engine.ReconcileDecision, error)
}

// Reconciler writes each Component's fence conditions.
type Reconciler struct {
	client  client.Client
	clock   clock.PassiveClock
	policy  Policy
	metrics *metrics
	events  *eventRecorder
	// components marks the Components in their domains' Marks, which
	// marks holds by served domain.
	components *marks.Kind[bool]
	marks      map[string]*Marks
}

// Marks tells how far the controller got in re-marking the Components of
// domain for its latest fence state, and how many are held; nil for a
// domain not served.
func (r *Reconciler) Marks(domain string) *Marks { return r.marks[domain] }

// Reconcile brings one Component's status in line with the policies'
// decision. It writes only when the status differs, and then applies only
// the fields fencegate owns (applyStatus), so that an actuator's fields are
// never overwritten and never conflict.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (result reconcile.Result, err error) {
	log := logr.FromContextOrDiscard(ctx)

	var comp fencegatev1alpha1.Component
	if err := r.client.Get(ctx, req.NamespacedName, &comp); err != nil {
		if apierrors.IsNotFound(err) {
			r.components.Forget(req.NamespacedName)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get component %s: %w", req.NamespacedName, err)
	}
	// A Component being deleted is its owners' business; a status write
	// would only race their finalizers.
	if !comp.DeletionTimestamp.IsZero() {
		r.components.Forget(req.NamespacedName)
		return reconcile.Result{}, nil
	}
	input, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&comp)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("convert component %s for the policies: %w", req.NamespacedName, err)
	}
	dec, err := r.components.Decide(ctx, &comp)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("fence domain of component %s: %w", req.NamespacedName, err)
	}
	decision, err := r.policy.Reconcile(ctx, dec.Domain, input)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("evaluate reconcile policy for %s: %w", req.NamespacedName, err)
	}
	fence := dec.Decided()

	desired := Desired(&comp, decision, fence, r.clock.Now())
	if decision.Hold {
		result.RequeueAfter = HeldRequeue
	}
	// The Component is marked once its status says what the decision
	// says: already, or after the write below.
	if equality.Semantic.DeepEqual(comp.Status, desired) {
		dec.Mark(decision.Hold)
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
	dec.Mark(decision.Hold)
	if after := sourceConflict(desired); after != conflictBefore {
		r.events.fenceChanged(&comp, decision)
	}
	log.V(1).Info("wrote fence conditions", "hold", decision.Hold, "reason", decision.Reason)
	return result, nil
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
	// Fences are the fence states the policies decide from, one per
	// served domain; each change of one re-enqueues every Component of
	// that domain.
	Fences map[string]fencestate.Source
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
	if opts.Policy == nil || len(opts.Fences) == 0 {
		return nil, errors.New("controller needs a policy to ask and the fence states it decides from")
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
		clock:   opts.Clock,
		policy:  opts.Policy,
		metrics: m,
		events:  newEventRecorder(mgr.GetEventRecorder("fencegate-controller"), opts.EventsPerSecond, opts.EventBurst, m),
		marks:   make(map[string]*Marks, len(opts.Fences)),
	}
	trackers := make(map[string]*marks.Tracker[bool], len(opts.Fences))
	for d := range opts.Fences {
		r.marks[d] = NewMarks()
		trackers[d] = r.marks[d].t
		r.metrics.held.WithLabelValues(d)
	}
	// Every change of a domain's marks publishes its held count.
	r.components = marks.NewKind(marks.Domains{Fences: opts.Fences, DomainOf: opts.Policy.DomainOf}, trackers,
		func(d string, t *marks.Tracker[bool]) { r.metrics.held.WithLabelValues(d).Set(float64(t.Count())) })
	b := ctrl.NewControllerManagedBy(mgr).
		For(&fencegatev1alpha1.Component{}).
		Named("component").
		WithOptions(ctrlcontroller.Options{MaxConcurrentReconciles: opts.MaxConcurrentReconciles}).
		// A namespace whose domain label changes moves its Components.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.componentsIn), builder.WithPredicates(marks.DomainLabelChanged))
	for d := range opts.Fences {
		b = b.WatchesRawSource(r.enqueueDomain(d, mgr.GetClient()))
	}
	err = b.Complete(r)
	if err != nil {
		return nil, fmt.Errorf("set up component controller: %w", err)
	}
	return r, nil
}
