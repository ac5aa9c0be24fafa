package gate

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/internal/cachepeek"
	"github.com/fencegate/fencegate/internal/ssa"
)

// FieldManager is the field manager under which the Gate applies the
// SourceConflict condition. It applies without force: a condition another
// manager owns (fencegate's own controller marks Components) is left as it
// is.
const FieldManager = "fencegate-gate"

// Reconciler wraps r, the reconciler of objects like obj (a pointer to a
// registered type):
//   - while this cluster does not hold the fence of an object's domain (or
//     the Gate cannot prove a live hold), r is not called; the object gets
//     the SourceConflict condition when its type is Conditioned (unless
//     WithoutConditions), and is requeued after Options.Requeue without
//     rate-limit penalty (Source re-enqueues it at the next transition);
//   - a deletion (an object gone, or being deleted) on such a cluster is
//     handed to r with LocalOnly(ctx) true;
//   - while it holds the fence, r runs under a context that ends when the
//     hold changes or ends, which the writes of Client carry.
//
// An object gone from the cache is judged by its own domain label as the
// cache last had it, when the Gate saw it deleted, else by its
// namespace's. Complete calls it with Source and Client for the same obj.
func (g *Gate) Reconciler(obj client.Object, r reconcile.Reconciler, opts ...ReconcilerOption) reconcile.Reconciler {
	var cfg reconcilerConfig
	for _, o := range opts {
		o(&cfg)
	}
	rec := &gated{g: g, proto: obj, objects: cachepeek.New(g.fences, g.client, obj), inner: r, conditions: marksConditions(obj, cfg),
		gone: newTombstones(g.opts.Clock)}
	// Not blocking: before the manager starts, this only registers the
	// informer, which the controller of obj watches anyway.
	inf, err := g.fences.GetInformer(context.Background(), obj, cache.BlockUntilSynced(false))
	if err == nil {
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: rec.gone.deleted})
	}
	if err != nil {
		g.log.Error(err, "watch deletions: an object gone from the cache will be judged by its namespace's fence domain", "type", fmt.Sprintf("%T", obj))
	}
	return rec
}

// marksConditions says whether the Gate marks SourceConflict on objects
// like obj: their type says it has conditions (Conditioned), and the
// caller did not opt out. fencegate's Component is not Conditioned: its
// controller sets a Component's SourceConflict from the policies, and its
// webhook admits no one else's status writes on a fenced cluster.
func marksConditions(obj client.Object, cfg reconcilerConfig) bool {
	_, ok := obj.(Conditioned)
	return ok && !cfg.noConditions
}

type gated struct {
	g     *Gate
	proto client.Object
	// objects reads the reconciled objects from the manager's cache
	// without copying them: the gate reads their labels and deletion
	// only, and the reconciler reads them again.
	objects    *cachepeek.Peeker
	inner      reconcile.Reconciler
	conditions bool
	// gone keeps the domain labels of deleted objects.
	gone *tombstones
}

func (r *gated) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	g := r.g
	if err := g.waitSynced(ctx); err != nil {
		return reconcile.Result{}, err
	}
	obj, found, err := r.objects.Get(ctx, req.NamespacedName)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("gate: read %s: %w", req.NamespacedName, err)
	}
	gone, label := !found, ""
	if found {
		label = obj.GetLabels()[domain.Label]
	} else {
		// Its own label, as the cache last had it: a deleted object's
		// domain is not its namespace's when it names another.
		label = r.gone.label(req.NamespacedName)
	}
	d, err := g.DomainOf(ctx, req.Namespace, label)
	if err != nil {
		return reconcile.Result{}, err
	}
	h, held, done := g.begin(ctx, d)
	defer done()
	switch {
	case h.Holding:
		return r.inner.Reconcile(held, req)
	case gone || obj.GetDeletionTimestamp() != nil:
		return r.inner.Reconcile(withLocalOnly(ctx), req)
	}
	if r.conditions {
		r.markConflict(ctx, req.NamespacedName, h)
	}
	return reconcile.Result{RequeueAfter: g.opts.Requeue}, nil
}

// markConflict applies SourceConflict=True with the fence's reason and
// message to the object at key, unless it already says so. A failure
// (another manager owns the condition, a conflict) leaves it: the
// reconcile is held back either way.
func (r *gated) markConflict(ctx context.Context, key client.ObjectKey, h Hold) {
	obj := r.proto.DeepCopyObject().(client.Object)
	if err := r.g.client.Get(ctx, key, obj); err != nil {
		r.g.log.V(1).Info("SourceConflict not marked", "object", key, "error", err.Error())
		return
	}
	want := metav1.Condition{
		Type: fencegatev1alpha1.ConditionSourceConflict, Status: metav1.ConditionTrue,
		Reason: h.Reason, Message: h.Message, ObservedGeneration: obj.GetGeneration(),
	}
	if want.Reason == "" {
		want.Reason = fencegatev1alpha1.ReasonFenceUnknown
	}
	if c := meta.FindStatusCondition(obj.(Conditioned).GetConditions(), want.Type); c != nil && c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message {
		return
	}
	gvk, err := r.g.gvkOf(obj)
	if err != nil {
		r.g.log.Error(err, "mark SourceConflict", "object", client.ObjectKeyFromObject(obj))
		return
	}
	want.LastTransitionTime = metav1.NewTime(r.g.opts.Clock.Now())
	status := map[string]any{"conditions": []any{map[string]any{
		"type": want.Type, "status": string(want.Status), "reason": want.Reason, "message": want.Message,
		"observedGeneration": want.ObservedGeneration, "lastTransitionTime": want.LastTransitionTime.UTC().Format("2006-01-02T15:04:05Z"),
	}}}
	cfg, err := ssa.StatusConfiguration(gvk, client.ObjectKeyFromObject(obj), status)
	if err == nil {
		err = r.g.client.Status().Apply(ctx, cfg, client.FieldOwner(FieldManager))
	}
	if err != nil {
		r.g.log.V(1).Info("SourceConflict not marked", "object", client.ObjectKeyFromObject(obj), "kind", gvk.Kind, "error", err.Error())
	}
}

// gvkOf is obj's kind in the Gate's scheme.
func (g *Gate) gvkOf(obj client.Object) (schema.GroupVersionKind, error) {
	gvk, err := apiutil.GVKForObject(obj, g.scheme)
	if err != nil {
		return gvk, fmt.Errorf("gate: the kind of %T: %w", obj, err)
	}
	return gvk, nil
}
