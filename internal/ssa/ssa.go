package ssa

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// StatusConfiguration is the apply configuration that sets status, a
// typed status value or an unstructured map holding exactly the fields the
// applier owns, on the object of kind gvk named key. A nil status owns
// nothing: applied, it gives up every field the applier owned.
func StatusConfiguration(gvk schema.GroupVersionKind, key client.ObjectKey, status any) (runtime.ApplyConfiguration, error) {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	if status != nil {
		fields, ok := status.(map[string]any)
		if !ok {
			var err error
			if fields, err = runtime.DefaultUnstructuredConverter.ToUnstructured(status); err != nil {
				return nil, fmt.Errorf("encode the %s status to apply: %w", gvk.Kind, err)
			}
		}
		u.Object["status"] = fields
	}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(key.Namespace)
	u.SetName(key.Name)
	return client.ApplyConfigurationFromUnstructured(u), nil
}

// ApplyStatus applies status (see StatusConfiguration) as manager, forcing
// ownership of what it sends: each field there is this manager's alone.
func ApplyStatus(ctx context.Context, c client.StatusClient, gvk schema.GroupVersionKind, key client.ObjectKey, status any, manager string) error {
	cfg, err := StatusConfiguration(gvk, key, status)
	if err != nil {
		return err
	}
	if err := c.Status().Apply(ctx, cfg, client.FieldOwner(manager), client.ForceOwnership); err != nil {
		return fmt.Errorf("apply the status of %s %s as %s: %w", gvk.Kind, describeKey(key), manager, err)
	}
	return nil
}

// Item is a list item to remove: its index in the list as read, and the
// value of its key field there.
type Item struct {
	Index int
	Key   string
}

// RemoveListItems removes items from the status list at path (a JSON
// pointer such as /status/conditions) of obj, as manager, in one JSON patch
// that first tests that each item's keyField still holds its Key. Items
// are removed from the highest index down, so that each index still names
// its item; no items patch nothing.
func RemoveListItems(ctx context.Context, c client.StatusClient, obj client.Object, path, keyField string, items []Item, manager string) error {
	if len(items) == 0 {
		return nil
	}
	ops := make([]map[string]any, 0, 2*len(items))
	for _, it := range sortedDown(items) {
		at := fmt.Sprintf("%s/%d", path, it.Index)
		ops = append(ops,
			map[string]any{"op": "test", "path": at + "/" + keyField, "value": it.Key},
			map[string]any{"op": "remove", "path": at})
	}
	patch, err := json.Marshal(ops)
	if err != nil {
		return fmt.Errorf("encode the removals from %s: %w", path, err)
	}
	if err := c.Status().Patch(ctx, obj, client.RawPatch(types.JSONPatchType, patch), client.FieldOwner(manager)); err != nil {
		return fmt.Errorf("remove %d item(s) from %s of %s: %w", len(items), path, describeKey(client.ObjectKeyFromObject(obj)), err)
	}
	return nil
}

// sortedDown is items from the highest index down.
func sortedDown(items []Item) []Item {
	out := slices.Clone(items)
	slices.SortFunc(out, func(a, b Item) int { return cmp.Compare(b.Index, a.Index) })
	return out
}

func describeKey(key client.ObjectKey) string {
	if key.Namespace == "" {
		return fmt.Sprintf("%q", key.Name)
	}
	return fmt.Sprintf("%s/%s", key.Namespace, key.Name)
}
