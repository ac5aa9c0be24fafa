package marks

import (
	"context"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fencestate"
)

// DomainOf returns the fence domain of an object in namespace whose
// domain.Label is label ("" for none).
type DomainOf func(ctx context.Context, namespace, label string) (string, error)

// Domains are the fence domains a controller serves, each with its fence
// state, and the rule that places an object in a domain.
type Domains struct {
	// Fences are the served domains' fence states, one each.
	Fences map[string]fencestate.Source
	// DomainOf places an object by its namespace and label.
	DomainOf DomainOf
}

// State is domain d's fence state now; unknown before its agent wrote one,
// and for a domain not served.
func (ds Domains) State(d string) fencestate.State {
	var s fencestate.State
	ok := false
	if src, served := ds.Fences[d]; served {
		s, ok = src.Fence()
	}
	if !ok {
		s.Status = fencestate.Unknown
	}
	return s
}

// Of is the domain obj belongs to: its own label's, or its namespace's.
func (ds Domains) Of(ctx context.Context, obj client.Object) (string, error) {
	return ds.DomainOf(ctx, obj.GetNamespace(), obj.GetLabels()[domain.Label])
}

// In names the objects of items that belong to domain d. Each namespace
// and label is placed once: a transition lists every object of a kind, and
// most share a few namespaces.
func In[T any, P interface {
	*T
	client.Object
}](ctx context.Context, ds Domains, d string, items []T) ([]types.NamespacedName, error) {
	type where struct{ namespace, label string }
	found := map[where]string{}
	var names []types.NamespacedName
	for i := range items {
		o := P(&items[i])
		w := where{o.GetNamespace(), o.GetLabels()[domain.Label]}
		in, ok := found[w]
		if !ok {
			var err error
			if in, err = ds.DomainOf(ctx, w.namespace, w.label); err != nil {
				return nil, err
			}
			found[w] = in
		}
		if in == d {
			names = append(names, client.ObjectKeyFromObject(o))
		}
	}
	return names, nil
}

// DomainLabelChanged passes the updates of a namespace that change its
// domain label: only those move the objects in it to another domain.
var DomainLabelChanged = predicate.Funcs{
	CreateFunc:  func(event.CreateEvent) bool { return false },
	DeleteFunc:  func(event.DeleteEvent) bool { return false },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return e.ObjectOld.GetLabels()[domain.Label] != e.ObjectNew.GetLabels()[domain.Label]
	},
}
