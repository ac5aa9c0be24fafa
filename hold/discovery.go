package hold

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlcontroller "sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/internal/marks"
	"github.com/fencegate/fencegate/internal/notify"
)

// The served kinds: each configured kind is looked up until the API server
// serves it, then gets a controller of its own, whose sources list the
// kind's objects of each domain on every fence transition of the domain.

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
	trackers := make(map[string]*marks.Tracker[mark], len(h.opts.Fences))
	for d := range h.opts.Fences {
		trackers[d] = marks.NewOn[mark](h.changes[d], nil)
	}
	r := &kindReconciler{h: h, gvk: gvk, kind: name, marks: marks.NewKind(h.domains, trackers, nil)}
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
		b = b.Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.objectsInNamespace), builder.WithPredicates(marks.DomainLabelChanged))
	}
	for d := range h.opts.Fences {
		b = b.WatchesRawSource(r.marks.Source(d, func(ctx context.Context) ([]types.NamespacedName, error) { return r.objectsOf(ctx, d) },
			fmt.Sprintf("the %s objects of domain %s", name, d)))
	}
	if err := b.Complete(r); err != nil {
		return fmt.Errorf("set up the hold controller of %s: %w", name, err)
	}
	h.mu.Lock()
	h.unserved = slices.DeleteFunc(h.unserved, func(g schema.GroupResource) bool { return g == gr })
	h.kinds = append(h.kinds, name)
	h.gvks[name] = gvk
	h.marks[name] = r.marks
	h.mu.Unlock()
	for _, ch := range h.changes {
		notify.Signal(ch)
	}
	return nil
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
	list := r.newList()
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
	list := r.newList()
	if err := r.h.reader.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	return marks.In(ctx, r.h.domains, d, list.Items)
}

// newList is an empty list of the kind.
func (r *kindReconciler) newList() *unstructured.UnstructuredList {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(r.gvk.GroupVersion().WithKind(r.gvk.Kind + "List"))
	return list
}
