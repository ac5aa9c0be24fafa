package gate

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/internal/notify"
)

// Source re-enqueues every object like obj (read through the manager's
// cache) on each transition of its domain's fence, for a controller's
// WatchesRawSource: once its cluster holds the fence again, each is
// reconciled at once, not at its next requeue.
func (g *Gate) Source(obj client.Object) source.Source {
	return source.Func(func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		gvk, err := g.gvkOf(obj)
		if err != nil {
			return err
		}
		gvk.Kind += "List"
		if _, err := g.scheme.New(gvk); err != nil {
			return fmt.Errorf("gate: the list of %s: %w", gvk.Kind, err)
		}
		// Transitions coalesce per domain while the last is enqueued, so
		// that the Gate never waits for the queue.
		var mu sync.Mutex
		pending := map[string]bool{}
		signal := notify.New()
		g.onTransition(func(d string) {
			mu.Lock()
			pending[d] = true
			mu.Unlock()
			notify.Signal(signal)
		})
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-signal:
				}
				mu.Lock()
				domains := make([]string, 0, len(pending))
				for d := range pending {
					domains = append(domains, d)
				}
				clear(pending)
				mu.Unlock()
				g.enqueue(ctx, q, gvk, domains)
			}
		}()
		return nil
	})
}

// enqueue adds every object of the list kind gvk in one of domains to q.
func (g *Gate) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], gvk schema.GroupVersionKind, domains []string) {
	list, err := g.scheme.New(gvk)
	if err != nil {
		return
	}
	objects, ok := list.(client.ObjectList)
	if !ok {
		return
	}
	if err := g.client.List(ctx, objects); err != nil {
		g.log.Error(err, "re-enqueue on a fence transition", "kind", gvk.Kind, "domains", domains)
		return
	}
	_ = meta.EachListItem(objects, func(item runtime.Object) error {
		o, ok := item.(client.Object)
		if !ok {
			return nil
		}
		if d, err := g.DomainOf(ctx, o.GetNamespace(), o.GetLabels()[domain.Label]); err == nil && slices.Contains(domains, d) {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}})
		}
		return nil
	})
}
