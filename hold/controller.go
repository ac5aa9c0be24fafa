package hold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/marks"
	"github.com/fencegate/fencegate/internal/notify"
)

// DefaultQuietFor is how long an object's actuator must report nothing
// running before the object counts as quiet.
const DefaultQuietFor = 10 * time.Second

// DefaultMaxConcurrentReconciles is how many objects of each kind are
// decided and patched at once by default.
const DefaultMaxConcurrentReconciles = 4

// resolveInterval is how often kinds the API server does not serve are
// looked up again (their CRD may be installed later).
const resolveInterval = 30 * time.Second

// Policy answers the hold controller's questions; the policy engine
// implements it.
type Policy interface {
	// DomainOf returns the fence domain of an object in namespace whose
	// domain.Label is label ("" for none).
	DomainOf(ctx context.Context, namespace, label string) (string, error)
	// Hold evaluates data.fencegate.hold.decision for an object of domain.
	Hold(ctx context.Context, domain string, obj map[string]any) (engine.HoldDecision, error)
}

// Options configure the hold controller.
type Options struct {
	// Kinds are the resources to hold, as group resources
	// (cronjobs.batch, kustomizations.kustomize.toolkit.fluxcd.io).
	Kinds []schema.GroupResource
	// Policy decides; the policy engine in production.
	Policy Policy
	// Fences are the fence states the policies decide from, one per
	// served domain; each change of one re-decides that domain's objects.
	Fences map[string]fencestate.Source
	// QuietFor is how long an object's actuator must report nothing
	// running before it counts as quiet (DefaultQuietFor when 0).
	QuietFor time.Duration
	// MaxConcurrentReconciles bounds each kind's parallel decisions and
	// patches (DefaultMaxConcurrentReconciles when 0).
	MaxConcurrentReconciles int
	// Registerer takes the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Clock is injected by tests; nil means the real clock.
	Clock clock.PassiveClock
}

// ParseKinds reads kinds as resource.group names (cronjobs.batch); a
// core resource has no group (configmaps).
func ParseKinds(names []string) ([]schema.GroupResource, error) {
	kinds := make([]schema.GroupResource, 0, len(names))
	for _, n := range names {
		gr := schema.ParseGroupResource(strings.TrimSpace(n))
		if gr.Resource == "" || strings.ContainsAny(gr.Resource, "/ ") || gr.Resource != strings.ToLower(gr.Resource) {
			return nil, fmt.Errorf("%q is not a resource.group name: want the plural resource and its API group, as kubectl names them (cronjobs.batch)", n)
		}
		if slices.Contains(kinds, gr) {
			return nil, fmt.Errorf("%q is named twice", n)
		}
		kinds = append(kinds, gr)
	}
	return kinds, nil
}

// Holder holds and releases the configured kinds' objects, and counts them
// per domain.
type Holder struct {
	opts    Options
	mgr     manager.Manager
	reader  client.Reader
	client  client.Client
	metrics *metrics

	mu sync.Mutex
	// unserved are the configured kinds not resolved to a served kind;
	// resolved is set once every kind was looked up once.
	unserved []schema.GroupResource
	resolved bool
	// kinds are the resolved kinds' names, gvks their kinds by name, and
	// marks each domain's trackers by kind name.
	kinds []string
	gvks  map[string]schema.GroupVersionKind
	marks map[string]map[string]*marks.Tracker[mark]
	// changes signal each domain's progress changes.
	changes map[string]chan struct{}
	// quietSince is when each held object was first seen quiet.
	quietSince sync.Map // objectKey → time.Time
}

// objectKey names an object of a kind.
type objectKey struct {
	kind string
	name types.NamespacedName
}

// SetupWithManager adds the hold controller to mgr. Each configured kind
// gets a controller of its own once the API server serves it; until then
// it is looked up again every 30 s. Everything runs on the leader.
func SetupWithManager(mgr manager.Manager, opts Options) (*Holder, error) {
	if opts.Policy == nil || len(opts.Fences) == 0 {
		return nil, errors.New("hold controller needs a policy to ask and the fence states it decides from")
	}
	if opts.QuietFor <= 0 {
		opts.QuietFor = DefaultQuietFor
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	h := &Holder{
		opts: opts, mgr: mgr, reader: mgr.GetCache(), client: mgr.GetClient(), metrics: m,
		unserved: slices.Clone(opts.Kinds),
		marks:    map[string]map[string]*marks.Tracker[mark]{},
		gvks:     map[string]schema.GroupVersionKind{},
		changes:  map[string]chan struct{}{},
	}
	for d := range opts.Fences {
		h.marks[d] = map[string]*marks.Tracker[mark]{}
		h.changes[d] = notify.New()
	}
	if len(opts.Kinds) == 0 {
		return h, nil
	}
	if err := mgr.Add(manager.RunnableFunc(h.resolve)); err != nil {
		return nil, fmt.Errorf("add the hold controller: %w", err)
	}
	return h, nil
}

// Changes signals (coalescing) each change of domain d's Progress; nil
// for a domain not served.
func (h *Holder) Changes(d string) <-chan struct{} { return h.changes[d] }

// Progress returns where the holding of domain d's objects stands (no
// kinds for a domain not served).
func (h *Holder) Progress(d string) Progress {
	h.mu.Lock()
	trackers := make(map[string]*marks.Tracker[mark], len(h.kinds))
	for _, k := range h.kinds {
		if t := h.marks[d][k]; t != nil {
			trackers[k] = t
		}
	}
	p := Progress{Resolved: h.resolved}
	for _, gr := range h.unserved {
		p.Unserved = append(p.Unserved, gr.String())
	}
	h.mu.Unlock()
	for k, t := range trackers {
		p.Kinds = append(p.Kinds, kindProgress(k, t))
	}
	sortKinds(p.Kinds)
	return p
}

// resolve sets up a controller for each configured kind the API server
// serves, and looks again for the others until ctx ends.
func (h *Holder) resolve(ctx context.Context) error {
	log := h.mgr.GetLogger().WithName("hold")
	ticker := time.NewTicker(resolveInterval)
	defer ticker.Stop()
	reported := map[schema.GroupResource]bool{}
	for {
		h.mu.Lock()
		pending := slices.Clone(h.unserved)
		h.mu.Unlock()
		for _, gr := range pending {
			gvk, err := h.mgr.GetRESTMapper().KindFor(gr.WithVersion(""))
			if err != nil {
				if !reported[gr] {
					log.Info("kind to hold is not served by the API server; looking again every 30s", "kind", gr.String(), "error", err.Error())
					reported[gr] = true
				}
				continue
			}
			if err := h.watch(gr, gvk); err != nil {
				return err
			}
			log.Info("holding kind", "kind", gr.String(), "version", gvk.Version)
		}
		h.mu.Lock()
		done := len(h.unserved) == 0
		first := !h.resolved
		h.resolved = true
		h.mu.Unlock()
		if first {
			for _, ch := range h.changes {
				notify.Signal(ch)
			}
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// watch starts holding the objects of gvk (configured as gr).
func (h *Holder) watch(gr schema.GroupResource, gvk schema.GroupVersionKind) error {
	name := gvk.GroupKind().String()
	r := &kindReconciler{h: h, gvk: gvk, kind: name}
	trackers := make(map[string]*marks.Tracker[mark], len(h.marks))
	for d := range h.opts.Fences {
		trackers[d] = marks.NewOn[mark](h.changes[d])
	}
	h.mu.Lock()
	for d, t := range trackers {
		h.marks[d][name] = t
	}
	h.mu.Unlock()
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(gvk)
	b := ctrl.NewControllerManagedBy(h.mgr).
		For(obj).
		Named("hold-" + strings.ToLower(strings.ReplaceAll(name, ".", "-"))).
		WithOptions(ctrlcontroller.Options{MaxConcurrentReconciles: h.opts.MaxConcurrentReconciles})
	if r.namespaced() {
		// A namespace whose domain label changes moves the objects in it
		// that have no label of their own to another domain: each is
		// decided again at once, not at its next change.
		b = b.Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.objectsInNamespace), builder.WithPredicates(domainLabelChanged))
	}
	for d, src := range h.opts.Fences {
		t := trackers[d]
		b = b.WatchesRawSource(t.Source(func() fencestate.Key { return fenceKey(src) }, src.Subscribe(),
			func(ctx context.Context) ([]types.NamespacedName, error) { return r.objectsOf(ctx, d) },
			fmt.Sprintf("the %s objects of domain %s", name, d)))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("set up the hold controller of %s: %w", name, err)
	}
	h.mu.Lock()
	h.unserved = slices.DeleteFunc(h.unserved, func(g schema.GroupResource) bool { return g == gr })
	h.kinds = append(h.kinds, name)
	h.gvks[name] = gvk
	h.mu.Unlock()
	for _, ch := range h.changes {
		notify.Signal(ch)
	}
	return nil
}

// fenceKey is the key of the fence state src has now; unknown's before
// its agent wrote one.
func fenceKey(src fencestate.Source) fencestate.Key { return fenceState(src).Key() }

// fenceState is the fence state src has now; unknown before its agent
// wrote one.
func fenceState(src fencestate.Source) fencestate.State {
	s, ok := src.Fence()
	if !ok {
		s.Status = fencestate.Unknown
	}
	return s
}

// kindReconciler holds and releases the objects of one kind.
type kindReconciler struct {
	h    *Holder
	gvk  schema.GroupVersionKind
	kind string
}

// domainLabelChanged passes the updates of a namespace that change its
// domain label: only those move the objects in it to another domain.
var domainLabelChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetLabels()[domain.Label] != e.ObjectNew.GetLabels()[domain.Label]
	},
}

// namespaced reports whether the kind's objects live in namespaces; a
// kind the REST mapper cannot say is taken as namespaced, which costs
// only a watch.
func (r *kindReconciler) namespaced() bool {
	m, err := r.h.mgr.GetRESTMapper().RESTMapping(r.gvk.GroupKind(), r.gvk.Version)
	return err != nil || m.Scope.Name() != meta.RESTScopeNameRoot
}

// objectsInNamespace lists the objects of the kind in namespace ns whose
// domain is their namespace's: they have no domain label of their own.
func (r *kindReconciler) objectsInNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := r.h.reader.List(ctx, list, client.InNamespace(ns.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		r.h.mgr.GetLogger().WithName("hold").Error(err, "listing the objects of a relabelled namespace failed", "kind", r.kind, "namespace", ns.GetName(),
			"effect", "each is decided for its new domain at its next change or the domain's next fence transition")
		return nil
	}
	var reqs []reconcile.Request
	for i := range list.Items {
		o := &list.Items[i]
		if o.GetNamespace() == ns.GetName() && o.GetLabels()[domain.Label] == "" {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(o)})
		}
	}
	return reqs
}

// objectsOf lists the objects of the kind in domain d.
func (r *kindReconciler) objectsOf(ctx context.Context, d string) ([]types.NamespacedName, error) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	if err := r.h.reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	var names []types.NamespacedName
	found := map[[2]string]string{}
	for i := range list.Items {
		o := &list.Items[i]
		where := [2]string{o.GetNamespace(), o.GetLabels()[domain.Label]}
		in, ok := found[where]
		if !ok {
			var err error
			if in, err = r.h.opts.Policy.DomainOf(ctx, where[0], where[1]); err != nil {
				return nil, err
			}
			found[where] = in
		}
		if in == d {
			names = append(names, client.ObjectKeyFromObject(o))
		}
	}
	return names, nil
}

// Reconcile decides one object, holds or releases it, and marks it.
func (r *kindReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	h := r.h
	key := objectKey{r.kind, req.NamespacedName}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	if err := h.reader.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(key, "")
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get %s %s: %w", r.kind, req.NamespacedName, err)
	}
	d, err := h.opts.Policy.DomainOf(ctx, obj.GetNamespace(), obj.GetLabels()[domain.Label])
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("fence domain of %s %s: %w", r.kind, req.NamespacedName, err)
	}
	r.forget(key, d)
	tracker := h.tracker(d, r.kind)
	var gen uint64
	if tracker != nil {
		gen = tracker.Generation()
	}
	src := h.opts.Fences[d]
	var before, after fencestate.State
	if src != nil {
		before = fenceState(src)
	}
	decision, err := h.opts.Policy.Hold(ctx, d, obj.Object)
	if errors.Is(err, engine.ErrNotReady) {
		// No fence state yet: nothing is decided, nothing released; the
		// agent's first state re-decides every object.
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("evaluate the hold policy for %s %s: %w", r.kind, req.NamespacedName, err)
	}
	if src != nil {
		after = fenceState(src)
	}
	// The takeover grace is read from both states the decision may have
	// been made under: a transition midway never shortens it.
	now := h.opts.Clock.Now()
	grace := max(graceLeft(before, now), graceLeft(after, now))
	decision = duringGrace(decision, grace)
	step, err := Plan(obj.Object, decision)
	if err != nil {
		h.metrics.failures.WithLabelValues(h.metricDomain(d), r.kind).Inc()
		r.mark(tracker, key, gen, before.Key(), after.Key(), mark{held: true, activity: fmt.Sprintf("%s %s: %v", obj.GetKind(), describe(req.NamespacedName), err)})
		return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("%s %s: %w", r.kind, req.NamespacedName, err))
	}
	log := logr.FromContextOrDiscard(ctx).WithValues("domain", d)
	if step.Action != Nothing {
		if err := r.send(ctx, obj, step); err != nil {
			h.metrics.failures.WithLabelValues(h.metricDomain(d), r.kind).Inc()
			return reconcile.Result{}, err
		}
		h.metrics.actions.WithLabelValues(h.metricDomain(d), r.kind, string(step.Action)).Inc()
		if step.SetAside != "" {
			// Bad input: held all the same, and reported, as its
			// release will be refused until a person looked at it.
			h.metrics.failures.WithLabelValues(h.metricDomain(d), r.kind).Inc()
			log.Error(errors.New(step.SetAside), "a record fencegate did not write was set aside: the object is held as one without a record, and nothing the record names is released until the annotation is removed",
				"annotation", UnreadableAnnotation)
		}
		done := log
		if len(step.Kept) > 0 {
			done = done.WithValues("kept", step.Kept)
		}
		if len(step.Reverted) > 0 {
			// Held again: whatever set it back (a parent applying its
			// declared state) will do so again until it is held too.
			h.metrics.reverts.WithLabelValues(h.metricDomain(d), r.kind).Inc()
			done = done.WithValues("reverted", step.Reverted, "parents", decision.Parents)
		}
		if grace > 0 {
			done = done.WithValues("takeoverGraceLeft", grace)
		}
		done.Info(actionMessage(step.Action))
	}
	if step.Refusal != "" {
		// What the unreadable record may claim stays held: the object
		// counts as held and not quiet, with what to do, until a person
		// removed the record.
		h.metrics.failures.WithLabelValues(h.metricDomain(d), r.kind).Inc()
		log.Error(errors.New(step.Refusal), "release refused", "refused", step.Refused)
		r.h.quietSince.Delete(key)
		r.mark(tracker, key, gen, before.Key(), after.Key(), mark{held: true, activity: fmt.Sprintf("%s %s: %s", obj.GetKind(), describe(req.NamespacedName), step.Refusal)})
		return reconcile.Result{}, nil
	}
	if decision.Kind == "" && step.Action == Nothing {
		// Of no held kind, and nothing of fencegate's on it to release
		// now: a record the takeover grace keeps is released when the
		// grace ends.
		r.forget(key, "")
		if _, recorded := obj.GetAnnotations()[RecordAnnotation]; recorded {
			return reconcile.Result{RequeueAfter: grace}, nil
		}
		return reconcile.Result{}, nil
	}
	m, wait := r.quiet(key, decision, step)
	if decision.Hold {
		if loose := r.unheldParents(ctx, decision.Parents); len(loose) > 0 {
			// A parent left to act may undo this hold: the object is
			// not quiet until the parent is held too.
			m.quiet = false
			m.activity = fmt.Sprintf("%s %s: %s", obj.GetKind(), describe(req.NamespacedName), strings.Join(loose, "; "))
		}
	}
	r.mark(tracker, key, gen, before.Key(), after.Key(), m)
	// During the takeover grace the object is decided again when it ends,
	// and released then: no fence transition marks that moment.
	return reconcile.Result{RequeueAfter: sooner(wait, grace)}, nil
}

// graceLeft is how long the takeover grace of state s still holds its
// domain's actuators at now: while this cluster is active and granted the
// fence after the previous holder's lease expired, that holder (cut off
// from the authority) is given until s.ResumeAtNS to hold its own. 0 when
// there is no grace or it has ended.
func graceLeft(s fencestate.State, now time.Time) time.Duration {
	if s.Status != fencestate.Active || s.ResumeAtNS == 0 {
		return 0
	}
	return max(time.Unix(0, s.ResumeAtNS).Sub(now), 0)
}

// duringGrace is decision d while grace is left: it holds, so that new
// objects are held as on a fenced cluster and nothing is released, and it
// is d as it is otherwise.
func duringGrace(d engine.HoldDecision, grace time.Duration) engine.HoldDecision {
	if grace > 0 {
		d.Hold = true
	}
	return d
}

// sooner is the shorter of two waits, 0 standing for none.
func sooner(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}

// unheldParents says, for each parent that could revert a hold and is not
// held itself, why: it is of a kind not held here, or its own hold is not
// in place. A parent that does not exist reverts nothing.
func (r *kindReconciler) unheldParents(ctx context.Context, parents []engine.ObjectRef) []string {
	h := r.h
	var loose []string
	for _, p := range parents {
		name := schema.GroupKind{Group: p.Group, Kind: p.Kind}.String()
		ref := name + " " + describe(types.NamespacedName{Namespace: p.Namespace, Name: p.Name})
		h.mu.Lock()
		gvk, watched := h.gvks[name]
		h.mu.Unlock()
		if !watched {
			loose = append(loose, fmt.Sprintf("its parent %s may revert the hold: that kind is not held here (hold.kinds)", ref))
			continue
		}
		parent := &unstructured.Unstructured{}
		parent.SetGroupVersionKind(gvk)
		if err := h.reader.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, parent); err != nil {
			if !apierrors.IsNotFound(err) {
				loose = append(loose, fmt.Sprintf("its parent %s cannot be read: %v", ref, err))
			}
			continue
		}
		held, err := r.held(ctx, parent)
		switch {
		case err != nil:
			loose = append(loose, fmt.Sprintf("its parent %s cannot be decided: %v", ref, err))
		case !held:
			loose = append(loose, fmt.Sprintf("its parent %s is not held yet and may revert the hold", ref))
		}
	}
	return loose
}

// held reports whether obj is held: the policies hold it, and its fields
// are at their held values.
func (r *kindReconciler) held(ctx context.Context, obj *unstructured.Unstructured) (bool, error) {
	h := r.h
	d, err := h.opts.Policy.DomainOf(ctx, obj.GetNamespace(), obj.GetLabels()[domain.Label])
	if err != nil {
		return false, err
	}
	decision, err := h.opts.Policy.Hold(ctx, d, obj.Object)
	if err != nil {
		return false, err
	}
	if src := h.opts.Fences[d]; src != nil {
		decision = duringGrace(decision, graceLeft(fenceState(src), h.opts.Clock.Now()))
	}
	step, err := Plan(obj.Object, decision)
	if err != nil {
		return false, err
	}
	return decision.Hold && step.Action == Nothing, nil
}

// quiet returns the object's mark and, for one quiet for less than
// QuietFor, when to look again.
func (r *kindReconciler) quiet(key objectKey, decision engine.HoldDecision, step Step) (mark, time.Duration) {
	m := mark{held: decision.Hold}
	if !decision.Hold {
		r.h.quietSince.Delete(key)
		return m, 0
	}
	if step.Action != Nothing || !decision.Quiet {
		// A patch just sent is not seen yet: the object it makes is
		// decided again when the cache has it.
		r.h.quietSince.Delete(key)
		m.activity = decision.Activity
		if m.activity == "" {
			m.activity = fmt.Sprintf("%s: the hold was just applied", describe(key.name))
		}
		return m, 0
	}
	now := r.h.opts.Clock.Now()
	v, _ := r.h.quietSince.LoadOrStore(key, now)
	since, _ := v.(time.Time)
	if left := r.h.opts.QuietFor - now.Sub(since); left > 0 {
		m.activity = fmt.Sprintf("%s %s: quiet for %s, counted quiet after %s", r.gvk.Kind, describe(key.name), now.Sub(since).Round(time.Second), r.h.opts.QuietFor)
		return m, left
	}
	m.quiet = true
	return m, 0
}

// send sends a step's patch as FieldManager.
func (r *kindReconciler) send(ctx context.Context, obj *unstructured.Unstructured, step Step) error {
	patch, err := json.Marshal(step.Patch)
	if err != nil {
		return fmt.Errorf("encode the %s patch: %w", step.Action, err)
	}
	target := &unstructured.Unstructured{}
	target.SetGroupVersionKind(r.gvk)
	target.SetNamespace(obj.GetNamespace())
	target.SetName(obj.GetName())
	if err := r.h.client.Patch(ctx, target, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("%s %s %s: %w", step.Action, r.kind, client.ObjectKeyFromObject(obj), err)
	}
	return nil
}

// mark records the object's mark in its domain's tracker, if served.
func (r *kindReconciler) mark(t *marks.Tracker[mark], key objectKey, gen uint64, before, after fencestate.Key, m mark) {
	if t != nil {
		t.Mark(key.name, gen, before, after, m)
	}
}

// forget drops the object from every domain's tracker but keep's.
func (r *kindReconciler) forget(key objectKey, keep string) {
	h := r.h
	if keep == "" {
		h.quietSince.Delete(key)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for d, byKind := range h.marks {
		if t := byKind[key.kind]; d != keep && t != nil && t.Tracks(key.name) {
			t.Gone(key.name)
		}
	}
}

// tracker is domain d's tracker of the kind; nil for a domain not served.
func (h *Holder) tracker(d, kind string) *marks.Tracker[mark] {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.marks[d][kind]
}

// metricDomain is d as a metric label: "unserved" for a domain not
// served, so that objects' labels cannot add series.
func (h *Holder) metricDomain(d string) string {
	if _, ok := h.opts.Fences[d]; ok {
		return d
	}
	return "unserved"
}

func actionMessage(a Action) string {
	if a == Holding {
		return "held"
	}
	return "released"
}

// describe names an object: namespace/name, or the name of a
// cluster-scoped one.
func describe(n types.NamespacedName) string {
	if n.Namespace == "" {
		return n.Name
	}
	return n.String()
}
