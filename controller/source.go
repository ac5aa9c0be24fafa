package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fencestate"
)

// enqueueDomainOn is a source that enqueues every Component of domain d
// when it starts and each time changes signals, and begins a generation of
// d's marks for the fence state of that moment with them: a transition of
// one domain re-marks its Components only.
func (r *Reconciler) enqueueDomainOn(d string, changes <-chan struct{}, reader client.Reader) source.Source {
	return r.marks[d].t.Source(func() fencestate.Key { return r.fence(d).Key() }, changes,
		func(ctx context.Context) ([]types.NamespacedName, error) { return r.componentsOf(ctx, reader, d) },
		"the Components of domain "+d)
}

// componentsOf lists the Components of domain d.
func (r *Reconciler) componentsOf(ctx context.Context, reader client.Reader, d string) ([]types.NamespacedName, error) {
	var list fencegatev1alpha1.ComponentList
	// The reader is the manager's cache: listing is a memory read, and
	// only the keys and labels are read, so the cached objects are not
	// deep-copied (a transition lists every Component).
	if err := reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	names := make([]types.NamespacedName, 0, len(list.Items))
	// The domains found, by namespace and label: a transition lists every
	// Component, and most share a few namespaces.
	type where struct{ namespace, label string }
	found := map[where]string{}
	for i := range list.Items {
		c := &list.Items[i]
		w := where{c.Namespace, c.Labels[domain.Label]}
		in, ok := found[w]
		if !ok {
			var err error
			if in, err = r.policy.DomainOf(ctx, w.namespace, w.label); err != nil {
				return nil, err
			}
			found[w] = in
		}
		if in == d {
			names = append(names, client.ObjectKeyFromObject(c))
		}
	}
	return names, nil
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
