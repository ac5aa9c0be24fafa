package controller_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
)

// TestControllerOnTrimmedCache checks, on a real API server, that the
// controller works from Components cached as CacheByObject trims them: a
// Component applied by kubectl, whose held status an earlier release wrote
// whole by update, is cached without its last-applied annotation and with
// only who owns its conditions, and once the fence returns the controller
// still removes the conditions it shares with that earlier writer.
func TestControllerOnTrimmedCache(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := newHarness(t, fenced)
	comp := &fencegatev1alpha1.Component{}
	comp.Namespace, comp.Name = "default", "comp-000"
	comp.Annotations = map[string]string{controller.LastAppliedAnnotation: `{"spec":{"enabled":true}}`, "team": "payments"}
	comp.Spec.Enabled = true
	if err := h.cp.Client.Create(ctx, comp, client.FieldOwner("kubectl-client-side-apply")); err != nil {
		t.Fatal(err)
	}
	decision, err := h.policy.Reconcile(ctx, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	comp.Status = controller.Desired(comp, decision, fenced, time.Now())
	if err := h.cp.Client.Status().Update(ctx, comp, client.FieldOwner("fencegate")); err != nil {
		t.Fatal(err)
	}

	h.run(t)
	var cached fencegatev1alpha1.Component
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		return h.cache.Get(ctx, client.ObjectKeyFromObject(comp), &cached) == nil, nil
	})
	if err != nil {
		t.Fatalf("the cache never held %s: %v", comp.Name, err)
	}
	if _, ok := cached.Annotations[controller.LastAppliedAnnotation]; ok || cached.Annotations["team"] != "payments" {
		t.Errorf("cached annotations = %v, want the team's without the last-applied configuration", cached.Annotations)
	}
	if len(cached.ManagedFields) != 1 || cached.ManagedFields[0].Manager != "fencegate" || cached.ManagedFields[0].Subresource != "status" {
		t.Errorf("cached managedFields = %+v, want the earlier release's status entry alone", cached.ManagedFields)
	}

	h.transition(active)
	h.waitAll(t, ctx, "free, without the earlier release's Stalled and Ready", isFree)
}
