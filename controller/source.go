package controller

import (
	"context"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// enqueueAllOn is a source that enqueues every Component each time changes
// signals. Bursts coalesce twice: the signal channel holds at most one
// pending signal, and the work queue holds each Component once.
func enqueueAllOn(changes <-chan struct{}, reader client.Reader) source.Source {
	return source.Func(func(ctx context.Context, queue workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-changes:
				}
				var list fencegatev1alpha1.ComponentList
				// The reader is the manager's cache: listing is a memory
				// read, and only the keys are used, so the cached objects
				// are not deep-copied (a transition lists every Component).
				if err := reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
					log.FromContext(ctx).Error(err, "listing Components failed", "effect", "not re-checked until the next fence transition")
					continue
				}
				for i := range list.Items {
					queue.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
				}
			}
		}()
		return nil
	})
}
