package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/internal/marks"
)

// enqueueDomain is a source that enqueues every Component of domain d
// when it starts and on each of d's fence transitions, and begins a
// generation of d's marks for the fence state of that moment with them: a
// transition of one domain re-marks its Components only.
func (r *Reconciler) enqueueDomain(d string, reader client.Reader) source.Source {
	return r.components.Source(d, func(ctx context.Context) ([]types.NamespacedName, error) {
		var list fencegatev1alpha1.ComponentList
		// The reader is the manager's cache: listing is a memory read,
		// and only the keys and labels are read, so the cached objects
		// are not deep-copied (a transition lists every Component).
		if err := reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
			return nil, err
		}
		return marks.In(ctx, r.components.Domains(), d, list.Items)
	}, "the Components of domain "+d)
}

// componentsIn are the requests of every Component in the namespace obj,
// whose domain label may have changed.
func (r *Reconciler) componentsIn(ctx context.Context, obj client.Object) []reconcile.Request {
	var list fencegatev1alpha1.ComponentList
	if err := r.client.List(ctx, &list, client.InNamespace(obj.GetName()), client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "listing the Components of a namespace failed", "namespace", obj.GetName(), "effect", "its Components keep their domain's marks until they are reconciled again")
		return nil
	}
	reqs := make([]reconcile.Request, len(list.Items))
	for i := range list.Items {
		reqs[i] = reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
	}
	return reqs
}
