package fenceobject

import (
	"context"
	"maps"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/internal/notify"
)

// countingInformer keeps the handlers added to a fake informer.
type countingInformer struct {
	*controllertest.FakeInformer
	handlers []toolscache.ResourceEventHandler
}

func (c *countingInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	c.handlers = append(c.handlers, h)
	return c.FakeInformer.AddEventHandler(h)
}

// TestEventsShareOneHandlerPerKind subscribes three domains' Keepers, as
// fencegate run's keepers do (the Fence three times, the Leases once): each
// kind's informer gets one handler, each event reaches only its domain's
// subscribers of its kind, and a subscription ends with its context.
func TestEventsShareOneHandlerPerKind(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fencegatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	fences := &countingInformer{FakeInformer: controllertest.NewFakeInformer(controllertest.Synced)}
	leases := &countingInformer{FakeInformer: controllertest.NewFakeInformer(controllertest.Synced)}
	events := NewEvents(&informertest.FakeInformers{Scheme: scheme, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{
		fencegatev1alpha1.GroupVersion.WithKind("Fence"):    fences,
		coordinationv1.SchemeGroupVersion.WithKind("Lease"): leases,
	}})

	// A Keeper's three loops each watch its Fence, one its Leases.
	type keeper struct {
		fence [3]chan struct{}
		lease chan struct{}
	}
	keepers := map[string]keeper{}
	cancels := map[string]context.CancelFunc{}
	for _, domain := range []string{"default", "payments", "billing"} {
		k := keeper{lease: notify.New()}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		cancels[domain] = cancel
		for i := range k.fence {
			k.fence[i] = notify.New()
			if err := events.watch(ctx, &fencegatev1alpha1.Fence{}, domain, k.fence[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := events.watch(ctx, &coordinationv1.Lease{}, domain, k.lease); err != nil {
			t.Fatal(err)
		}
		keepers[domain] = k
	}
	if len(fences.handlers) != 1 || len(leases.handlers) != 1 {
		t.Fatalf("%d handlers on the Fences' informer and %d on the Leases', want one each", len(fences.handlers), len(leases.handlers))
	}

	// drain reports how many of each domain's Fence and Lease channels
	// were signalled, and empties them.
	drain := func() map[string][2]int {
		got := map[string][2]int{}
		for domain, k := range keepers {
			var n [2]int
			for _, ch := range append(k.fence[:], k.lease) {
				select {
				case <-ch:
					if ch == k.lease {
						n[1]++
					} else {
						n[0]++
					}
				default:
				}
			}
			if n != [2]int{} {
				got[domain] = n
			}
		}
		return got
	}
	payments := &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: "payments"}}
	billingLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "fencegate-billing-a", Labels: map[string]string{membership.LabelDomain: "billing"}}}
	otherLease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"}}
	tests := []struct {
		name  string
		event func()
		want  map[string][2]int
	}{
		{"a Fence added", func() { fences.Add(payments) }, map[string][2]int{"payments": {3, 0}}},
		{"a Fence updated", func() { fences.Update(payments, payments) }, map[string][2]int{"payments": {3, 0}}},
		{"a Fence deleted", func() { fences.Delete(payments) }, map[string][2]int{"payments": {3, 0}}},
		{"a Fence deleted, its last state unknown", func() {
			fences.handlers[0].OnDelete(toolscache.DeletedFinalStateUnknown{Key: "payments", Obj: payments})
		}, map[string][2]int{"payments": {3, 0}}},
		{"a Fence of a domain not served", func() {
			fences.Add(&fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: "other"}})
		}, map[string][2]int{}},
		{"a Lease of a domain", func() { leases.Add(billingLease) }, map[string][2]int{"billing": {0, 1}}},
		{"a Lease of no domain", func() { leases.Add(otherLease) }, map[string][2]int{}},
	}
	for _, tc := range tests {
		tc.event()
		if got := drain(); !maps.Equal(got, tc.want) {
			t.Errorf("%s: signals %v, want %v", tc.name, got, tc.want)
		}
	}

	// A subscription ends soon after its context (context.AfterFunc).
	cancels["payments"]()
	subscriptions := func() int {
		events.mu.Lock()
		defer events.mu.Unlock()
		return len(events.subscribers)
	}
	for deadline := time.Now().Add(10 * time.Second); subscriptions() != 4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d subscriptions left after payments' context ended, want the other two domains' Fence and Lease ones", subscriptions())
		}
	}
	fences.Add(payments)
	if got := drain(); len(got) != 0 {
		t.Errorf("payments' subscriptions ended with their context, yet its Fence signalled %v", got)
	}
}
