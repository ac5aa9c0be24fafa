// Package cachepeek reads objects straight from the store of a
// controller-runtime cache's informer, without the deep copy a cache Get
// makes: for hot paths (the gate of every reconcile, the domain of every
// admission) that read a label or a deletion timestamp of objects the cache
// already holds.
package cachepeek

import (
	"context"
	"fmt"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Peeker reads objects of one kind. It is safe for concurrent use.
type Peeker struct {
	informers cache.Informers
	reader    client.Reader
	proto     client.Object
	// store is the informer's store once it has synced; until then, and
	// for caches whose informers have no single store (a cache over
	// several namespaces), reads go through reader, which copies.
	store atomic.Pointer[toolscache.Store]
	// storeless is set once the informer proved to have no store, so that
	// no read asks for it again.
	storeless atomic.Bool
}

// New reads objects like proto (a pointer to a registered type) from the
// informers' stores, or through reader (the same cache) where it cannot;
// informers may be nil, for a reader that is not a cache.
func New(informers cache.Informers, reader client.Reader, proto client.Object) *Peeker {
	return &Peeker{informers: informers, reader: reader, proto: proto}
}

// Get returns the metadata of the object at key, or false if the cache
// does not hold it. The object is the cache's own: it must not be changed.
func (p *Peeker) Get(ctx context.Context, key client.ObjectKey) (metav1.Object, bool, error) {
	store := p.storeOf(ctx)
	if store == nil {
		obj := p.proto.DeepCopyObject().(client.Object)
		switch err := p.reader.Get(ctx, key, obj); {
		case apierrors.IsNotFound(err):
			return nil, false, nil
		case err != nil:
			return nil, false, err
		}
		return obj, true, nil
	}
	item, exists, err := store.GetByKey(toolscache.NewObjectName(key.Namespace, key.Name).String())
	if err != nil || !exists {
		return nil, false, err
	}
	m, err := meta.Accessor(item)
	if err != nil {
		return nil, false, fmt.Errorf("the cached %s: %w", key, err)
	}
	return m, true, nil
}

// storeOf is the informer's store once it has synced; nil until then or
// if it has none.
func (p *Peeker) storeOf(ctx context.Context) toolscache.Store {
	if s := p.store.Load(); s != nil {
		return *s
	}
	if p.informers == nil || p.storeless.Load() {
		return nil
	}
	inf, err := p.informers.GetInformer(ctx, p.proto, cache.BlockUntilSynced(false))
	if err != nil || !inf.HasSynced() {
		return nil
	}
	withStore, ok := inf.(interface{ GetStore() toolscache.Store })
	if !ok {
		p.storeless.Store(true)
		return nil
	}
	s := withStore.GetStore()
	p.store.Store(&s)
	return s
}
