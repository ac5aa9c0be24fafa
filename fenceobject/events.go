package fenceobject

import (
	"context"
	"fmt"
	"reflect"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/internal/notify"
)

// Events hands the cache's events of Fences and instance Leases to the
// Keepers of their domains. It adds one handler to each kind's informer,
// whatever the number of domains: client-go runs two goroutines and a
// buffer for every handler, which a handler per Keeper and watched kind
// made four of each per served domain.
type Events struct {
	cache cache.Cache

	mu sync.Mutex
	// watched are the kinds whose informer has Events' handler.
	watched map[reflect.Type]bool
	// subscribers are signalled on every event of their kind and domain.
	subscribers map[subscription]map[chan<- struct{}]bool
}

// subscription is a kind of object, and a domain.
type subscription struct {
	kind   reflect.Type
	domain string
}

// NewEvents returns the Events of c's informers; the Keepers of every
// domain that one cache serves share them.
func NewEvents(c cache.Cache) *Events {
	return &Events{cache: c, watched: map[reflect.Type]bool{}, subscribers: map[subscription]map[chan<- struct{}]bool{}}
}

// watch signals events on every change, until ctx ends, of an object of
// obj's kind (a Fence or a Lease) that belongs to domain: its Fence, or its
// instances' Leases.
func (e *Events) watch(ctx context.Context, obj client.Object, domain string, events chan<- struct{}) error {
	kind := reflect.TypeOf(obj)
	if err := e.handle(ctx, obj, kind); err != nil {
		return err
	}
	key := subscription{kind: kind, domain: domain}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.subscribers[key] == nil {
		e.subscribers[key] = map[chan<- struct{}]bool{}
	}
	e.subscribers[key][events] = true
	context.AfterFunc(ctx, func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		delete(e.subscribers[key], events)
		if len(e.subscribers[key]) == 0 {
			delete(e.subscribers, key)
		}
	})
	return nil
}

// handle adds Events' handler to the informer of kind, once.
func (e *Events) handle(ctx context.Context, obj client.Object, kind reflect.Type) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.watched[kind] {
		return nil
	}
	inf, err := e.cache.GetInformer(ctx, obj)
	if err != nil {
		return fmt.Errorf("watch %T: %w", obj, err)
	}
	signal := func(o any) {
		if tomb, ok := o.(toolscache.DeletedFinalStateUnknown); ok {
			o = tomb.Obj
		}
		if o, ok := o.(client.Object); ok {
			e.signal(kind, domainOf(o))
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    signal,
		UpdateFunc: func(_, o any) { signal(o) },
		DeleteFunc: signal,
	}); err != nil {
		return fmt.Errorf("watch %T: %w", obj, err)
	}
	e.watched[kind] = true
	return nil
}

// signal signals every subscriber of kind in domain.
func (e *Events) signal(kind reflect.Type, domain string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for events := range e.subscribers[subscription{kind: kind, domain: domain}] {
		notify.Signal(events)
	}
}

// domainOf is the domain o belongs to: a Fence's name, or the domain label
// of an instance's Lease.
func domainOf(o client.Object) string {
	if _, ok := o.(*fencegatev1alpha1.Fence); ok {
		return o.GetName()
	}
	return o.GetLabels()[membership.LabelDomain]
}
