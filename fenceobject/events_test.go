package fenceobject

import (
	"context"
	"maps"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllertest"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
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

// TestLoopsShareOneFenceHandler starts a Keeper's three loops' watches as
// they start them: the Fences' informer gets one handler, which signals
// all three loops on every event of the Keeper's own Fence and no other,
// and the Leases' informer one, which signals Status alone.
func TestLoopsShareOneFenceHandler(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fencegatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := coordinationv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	fences := &countingInformer{FakeInformer: controllertest.NewFakeInformer(controllertest.Synced)}
	leases := &countingInformer{FakeInformer: controllertest.NewFakeInformer(controllertest.Synced)}
	informers := &informertest.FakeInformers{Scheme: scheme, InformersByGVK: map[schema.GroupVersionKind]toolscache.SharedIndexInformer{
		fencegatev1alpha1.GroupVersion.WithKind("Fence"):    fences,
		coordinationv1.SchemeGroupVersion.WithKind("Lease"): leases,
	}}
	k := &Keeper{opts: Options{Cache: informers, Domain: "payments"}, events: newLoopEvents()}

	// Instance, EpochSync, then Status, as each loop starts.
	ctx := context.Background()
	for range 3 {
		if err := k.watchFence(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := k.watch(ctx, &coordinationv1.Lease{}, k.events.status); err != nil {
		t.Fatal(err)
	}
	if len(fences.handlers) != 1 || len(leases.handlers) != 1 {
		t.Fatalf("%d handlers on the Fences' informer and %d on the Leases', want one each", len(fences.handlers), len(leases.handlers))
	}

	loops := map[string]chan struct{}{"instance": k.events.instance, "epoch": k.events.epoch, "status": k.events.status}
	signalled := func() map[string]bool {
		got := map[string]bool{}
		for name, ch := range loops {
			select {
			case <-ch:
				got[name] = true
			default:
			}
		}
		return got
	}
	fence := &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: "payments"}}
	all := map[string]bool{"instance": true, "epoch": true, "status": true}
	tests := []struct {
		name  string
		event func()
		want  map[string]bool
	}{
		{"its Fence added", func() { fences.Add(fence) }, all},
		{"its Fence updated", func() { fences.Update(fence, fence) }, all},
		{"its Fence deleted", func() { fences.Delete(fence) }, all},
		{"its Fence deleted, its last state unknown", func() {
			fences.handlers[0].OnDelete(toolscache.DeletedFinalStateUnknown{Key: "payments", Obj: fence})
		}, all},
		{"another domain's Fence", func() {
			fences.Add(&fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: "billing"}})
		}, map[string]bool{}},
		{"an instance's Lease", func() {
			leases.Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{membership.LabelDomain: "payments"}}})
		}, map[string]bool{"status": true}},
		{"another domain's Lease", func() {
			leases.Add(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{membership.LabelDomain: "billing"}}})
		}, map[string]bool{}},
	}
	for _, tc := range tests {
		tc.event()
		if got := signalled(); !maps.Equal(got, tc.want) {
			t.Errorf("%s: signalled %v, want %v", tc.name, got, tc.want)
		}
	}
}
