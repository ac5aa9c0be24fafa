package hold

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/engine"
)

// Quiet tracking: a held object counts as quiet once its actuator has
// reported nothing running for QuietFor and no parent of it is left to
// revert its hold.

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
	d, err := h.domains.Of(ctx, obj)
	if err != nil {
		return false, err
	}
	decision, err := h.opts.Policy.Hold(ctx, d, obj.Object)
	if err != nil {
		return false, err
	}
	decision = duringGrace(decision, graceLeft(h.domains.State(d), h.opts.Clock.Now()))
	step, err := Plan(obj.Object, decision)
	if err != nil {
		return false, err
	}
	return decision.Hold && step.Action == Nothing, nil
}
