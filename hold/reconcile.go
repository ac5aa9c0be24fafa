package hold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/internal/marks"
)

// kindReconciler holds and releases the objects of one kind.
type kindReconciler struct {
	h    *Holder
	gvk  schema.GroupVersionKind
	kind string
	// marks marks its objects in their domains.
	marks *marks.Kind[mark]
}

// Reconcile decides one object, holds or releases it, and marks it.
func (r *kindReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	h := r.h
	key := objectKey{r.kind, req.NamespacedName}
	obj := &unstructured.Unstructured{}
	obj.SetGroupVersionKind(r.gvk)
	if err := h.reader.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.gone(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("get %s %s: %w", r.kind, req.NamespacedName, err)
	}
	dec, err := r.marks.Decide(ctx, obj)
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("fence domain of %s %s: %w", r.kind, req.NamespacedName, err)
	}
	d := dec.Domain
	decision, err := h.opts.Policy.Hold(ctx, d, obj.Object)
	if errors.Is(err, engine.ErrNotReady) {
		// No fence state yet: nothing is decided, nothing released; the
		// agent's first state re-decides every object.
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("evaluate the hold policy for %s %s: %w", r.kind, req.NamespacedName, err)
	}
	dec.Decided()
	// The takeover grace is read from both states the decision may have
	// been made under: a transition midway never shortens it.
	now := h.opts.Clock.Now()
	grace := max(graceLeft(dec.Before, now), graceLeft(dec.After, now))
	decision = duringGrace(decision, grace)
	step, err := Plan(obj.Object, decision)
	if err != nil {
		h.metrics.failures.WithLabelValues(h.metricDomain(d), r.kind).Inc()
		dec.Mark(mark{held: true, activity: fmt.Sprintf("%s %s: %v", obj.GetKind(), describe(req.NamespacedName), err)})
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
		dec.Mark(mark{held: true, activity: fmt.Sprintf("%s %s: %s", obj.GetKind(), describe(req.NamespacedName), step.Refusal)})
		return reconcile.Result{}, nil
	}
	if decision.Kind == "" && step.Action == Nothing {
		// Of no held kind, and nothing of fencegate's on it to release
		// now: a record the takeover grace keeps is released when the
		// grace ends.
		r.gone(key)
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
	dec.Mark(m)
	// During the takeover grace the object is decided again when it ends,
	// and released then: no fence transition marks that moment.
	return reconcile.Result{RequeueAfter: sooner(wait, grace)}, nil
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

// gone drops the object from the marks of every domain, and forgets when
// it was first seen quiet: it was deleted, or is no longer of a held kind.
func (r *kindReconciler) gone(key objectKey) {
	r.h.quietSince.Delete(key)
	r.marks.Forget(key.name)
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
