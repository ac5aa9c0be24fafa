package controller

import (
	"context"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/internal/ssa"
)

// FieldManager is the field manager of the status fields the controller
// writes by server-side apply: status.observedGeneration, status.fence, the
// SourceConflict condition and, while a Component is held, its Ready and
// Stalled conditions and an empty status.access. An actuator that applies
// its own fields (status.access, its conditions) under another manager
// never conflicts with it; one that publishes access while the Component is
// held is refused with a conflict.
const FieldManager = "fencegate-controller"

// applyStatus returns the apply configuration of the fields the controller
// owns, taken from desired (Desired's result for comp).
func applyStatus(comp *fencegatev1alpha1.Component, desired fencegatev1alpha1.ComponentStatus, held bool) (runtime.ApplyConfiguration, error) {
	owned := fencegatev1alpha1.ComponentStatus{ObservedGeneration: desired.ObservedGeneration, Fence: desired.Fence}
	for _, c := range desired.Conditions {
		switch {
		case c.Type == fencegatev1alpha1.ConditionSourceConflict,
			held && (c.Type == fencegatev1alpha1.ConditionReady || c.Type == fencegatev1alpha1.ConditionStalled):
			owned.Conditions = append(owned.Conditions, c)
		}
	}
	status, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&owned)
	if err != nil {
		return nil, fmt.Errorf("encode the status to apply: %w", err)
	}
	if held {
		// Owning an empty list is what keeps the actuator's endpoints off
		// while held; leaving it out would leave them in place.
		status["access"] = []any{}
	}
	return ssa.StatusConfiguration(fencegatev1alpha1.GroupVersion.WithKind("Component"), client.ObjectKeyFromObject(comp), status)
}

// removeSharedConditions removes from comp's live status the conditions
// that desired drops and that another field manager also owns, in one JSON
// patch. The controller's apply removes the conditions it alone owns by
// leaving them out; one that an actuator (or an earlier fencegate, which
// wrote the whole status by update) owns a field of would only lose the
// controller's fields, and what is left would not be a valid condition.
// Each removal first tests the condition's type, so a status that changed
// since it was read fails the patch instead of losing another condition.
func (r *Reconciler) removeSharedConditions(ctx context.Context, comp *fencegatev1alpha1.Component, desired fencegatev1alpha1.ComponentStatus) error {
	var drop []ssa.Item
	for i, c := range comp.Status.Conditions {
		if meta.FindStatusCondition(desired.Conditions, c.Type) == nil && ownedByOthers(comp, c.Type) {
			drop = append(drop, ssa.Item{Index: i, Key: c.Type})
		}
	}
	if err := ssa.RemoveListItems(ctx, r.client, comp, "/status/conditions", "type", drop, FieldManager); err != nil {
		return fmt.Errorf("remove the conditions fencegate no longer sets: %w", err)
	}
	return nil
}

// ownedByOthers reports whether a field manager other than FieldManager owns
// a field of comp's condition of type condType.
func ownedByOthers(comp *fencegatev1alpha1.Component, condType string) bool {
	key := fmt.Sprintf("k:{%q:%q}", "type", condType)
	for _, f := range comp.ManagedFields {
		if f.Manager == FieldManager || f.Subresource != "status" || f.FieldsV1 == nil {
			continue
		}
		var fields statusConditions
		if json.Unmarshal(f.FieldsV1.GetRawBytes(), &fields) != nil {
			return true // unreadable: removing by patch is always right
		}
		if _, ok := fields.Status.Conditions[key]; ok {
			return true
		}
	}
	return false
}
