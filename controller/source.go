package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/types"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fencestate"
)

// enqueueAllOn is a source that enqueues every Component when it starts and
// each time changes signals, and begins a generation of marks for the fence
// state of that moment with them. Bursts coalesce twice: the signal channel
// holds at most one pending signal, and the work queue holds each Component
// once.
func enqueueAllOn(changes <-chan struct{}, reader client.Reader, fence func() fencestate.State, marks *Marks) source.Source {
	return source.Func(func(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				// The state is read before the list: a Component created
				// after it is admitted under this state or a later one.
				key := fence().Key()
				var list fencegatev1alpha1.ComponentList
				// The reader is the manager's cache: listing is a memory
				// read, and only the keys are used, so the cached objects
				// are not deep-copied (a transition lists every Component).
				if err := reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
					if ctx.Err() != nil {
						return
					}
					log.FromContext(ctx).Error(err, "listing Components failed", "effect", "not re-checked until the next fence transition")
				} else {
					names := make([]types.NamespacedName, len(list.Items))
					for i := range list.Items {
						names[i] = client.ObjectKeyFromObject(&list.Items[i])
					}
					marks.begin(key, names)
					for _, n := range names {
						queue.Add(reconcile.Request{NamespacedName: n})
					}
				}
				select {
				case <-ctx.Done():
					return
				case <-changes:
				}
			}
		}()
		return nil
	})
}
