package controller_test

import (
	"context"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
)

// actuator is the second writer of a Component's status: it applies
// status.access and a Ready condition of its own under its own field
// manager, as an actuator deploying the Component would.
const actuator = "example-actuator"

// actuatorApply applies the actuator's status fields to comp-000.
func actuatorApply(ctx context.Context, h *harness, endpoint string) error {
	u := &unstructured.Unstructured{Object: map[string]any{"status": map[string]any{
		"access": []any{map[string]any{"name": "web", "url": endpoint}},
		"conditions": []any{map[string]any{
			"type": fencegatev1alpha1.ConditionReady, "status": "True", "reason": "Deployed", "message": "deployed",
			"lastTransitionTime": time.Now().UTC().Truncate(time.Second).Format(time.RFC3339),
		}},
	}}}
	u.SetGroupVersionKind(fencegatev1alpha1.GroupVersion.WithKind("Component"))
	u.SetNamespace("default")
	u.SetName("comp-000")
	return h.cp.Client.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(actuator))
}

func get(t *testing.T, ctx context.Context, h *harness) *fencegatev1alpha1.Component {
	t.Helper()
	var comp fencegatev1alpha1.Component
	if err := h.cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "comp-000"}, &comp); err != nil {
		t.Fatal(err)
	}
	return &comp
}

// owners returns the field managers of comp's status.
func owners(comp *fencegatev1alpha1.Component) []string {
	var out []string
	for _, f := range comp.ManagedFields {
		if f.Subresource == "status" && !slices.Contains(out, f.Manager) {
			out = append(out, f.Manager)
		}
	}
	slices.Sort(out)
	return out
}

// TestStatusByServerSideApply checks, on a real API server, that the
// controller and an actuator share a Component's status without
// conflicts: the controller applies its conditions and status.fence under
// its own field manager, and the actuator's status.access and Ready stay
// its own while the cluster holds the fence; while it does not, the
// controller takes them over, and the actuator's apply of access is
// refused.
func TestStatusByServerSideApply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := start(t, active)
	h.createComponents(t, ctx, 1)
	h.waitAll(t, ctx, "free", isFree)

	t.Run("1 while active, the actuator publishes access and its readiness", func(t *testing.T) {
		if err := actuatorApply(ctx, h, "https://billing.example.com"); err != nil {
			t.Fatalf("the actuator's apply = %v, want no conflict with the controller", err)
		}
		// A fence signal that changes nothing re-checks the Component.
		before := reconciles(t)
		h.transition(active)
		waitReconciles(t, ctx, before+1)
		comp := get(t, ctx, h)
		if len(comp.Status.Access) != 1 || !meta.IsStatusConditionTrue(comp.Status.Conditions, fencegatev1alpha1.ConditionReady) || !isFreeBut(comp) {
			t.Errorf("status %+v: want the actuator's access and Ready beside the controller's SourceConflict", comp.Status)
		}
		if got, want := owners(comp), []string{actuator, controller.FieldManager}; !slices.Equal(got, want) {
			t.Errorf("status managers %q, want %q", got, want)
		}
	})

	t.Run("2 while fenced, the controller clears access and holds the Component", func(t *testing.T) {
		h.transition(fenced)
		h.waitAll(t, ctx, "held without access", func(c *fencegatev1alpha1.Component) bool {
			return isHeld(c) && len(c.Status.Access) == 0
		})
		err := actuatorApply(ctx, h, "https://billing.example.com")
		if !apierrors.IsConflict(err) {
			t.Errorf("the actuator's apply of access while held = %v, want a conflict with %s", err, controller.FieldManager)
		}
	})

	t.Run("3 fence regained: the fence's Ready goes, the actuator publishes again", func(t *testing.T) {
		h.transition(active)
		h.waitAll(t, ctx, "free", isFree)
		if err := actuatorApply(ctx, h, "https://billing-2.example.com"); err != nil {
			t.Fatalf("the actuator's apply after the fence returned = %v", err)
		}
		comp := get(t, ctx, h)
		if len(comp.Status.Access) != 1 || comp.Status.Access[0].URL != "https://billing-2.example.com" || !isFreeBut(comp) {
			t.Errorf("status %+v: want the actuator's new access beside the controller's conditions", comp.Status)
		}
	})
}

// isFreeBut is isFree for a Component whose actuator reports Ready itself.
func isFreeBut(c *fencegatev1alpha1.Component) bool {
	sc := sourceConflict(c)
	return sc != nil && sc.Status == metav1.ConditionFalse && sc.Reason == fencegatev1alpha1.ReasonFenceHeld &&
		meta.FindStatusCondition(c.Status.Conditions, fencegatev1alpha1.ConditionStalled) == nil &&
		c.Status.Fence != nil && c.Status.Fence.State == "active"
}

// TestConditionsOfAnEarlierRelease checks that the status an earlier
// release left behind, written whole by update under field manager
// "fencegate", is brought in line: the Stalled and Ready conditions it wrote
// while the Component was held go once the fence returns, although the
// controller's apply never owned them.
func TestConditionsOfAnEarlierRelease(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := newHarness(t, fenced)
	h.createComponents(t, ctx, 1)
	comp := get(t, ctx, h)
	decision, err := h.policy.Reconcile(ctx, "default", nil)
	if err != nil {
		t.Fatal(err)
	}
	comp.Status = controller.Desired(comp, decision, fenced, time.Now())
	if err := h.cp.Client.Status().Update(ctx, comp, client.FieldOwner("fencegate")); err != nil {
		t.Fatal(err)
	}
	if !isHeld(get(t, ctx, h)) {
		t.Fatal("the earlier release's status does not hold the Component")
	}

	h.run(t)
	h.transition(active)
	h.waitAll(t, ctx, "free, without the earlier release's Stalled and Ready", isFree)
}
