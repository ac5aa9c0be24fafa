package controller

import (
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// LastAppliedAnnotation is where `kubectl apply` (client-side) keeps the
// whole object it last applied: often as large as the object itself.
const LastAppliedAnnotation = corev1.LastAppliedConfigAnnotation

// CacheByObject is what the manager's cache keeps of the objects the
// controller reads: it is merged into cache.Options.ByObject, and the
// cache then holds each Component and Namespace as TrimComponent and
// TrimNamespace leave it. A cache holds every Component of the cluster, so
// what each one costs is what fencegate's memory grows with.
func CacheByObject() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&fencegatev1alpha1.Component{}: {Transform: TrimComponent},
		&corev1.Namespace{}:            {Transform: TrimNamespace},
	}
}

// TrimComponent is the cache transform of Components: it drops what no
// reader of a cached Component uses, before the object is stored.
//
//   - The last-applied annotation (LastAppliedAnnotation): nothing of
//     fencegate reads it, and the reconcile policies are asked about the
//     Component without it.
//   - metadata.managedFields, but for who owns which status condition: the
//     entries of the status subresource of other field managers than
//     FieldManager, each cut down to the keys of f:status.f:conditions
//     and without its time. That is all that removeSharedConditions reads
//     (ownedByOthers), and it answers the same from the trimmed entries;
//     an entry it cannot read is kept whole, as ownedByOthers then removes
//     by patch. The status itself is written by server-side apply of an
//     apply configuration built from the desired status, which reads no
//     managedFields.
//
// It trims typed Components only: the cache keeps the Components it reads
// as unstructured objects (the hold controller's, were Components a held
// kind, which reads the owners of every field) whole. It is idempotent.
func TrimComponent(in any) (any, error) {
	if c, ok := in.(*fencegatev1alpha1.Component); ok {
		dropLastApplied(c)
		if c.ManagedFields != nil {
			c.ManagedFields = conditionOwners(c.ManagedFields)
		}
	}
	return in, nil
}

// TrimNamespace is the cache transform of Namespaces: fencegate reads only
// their domain label from the cache (package domain, and the controller's
// watch of its changes), so their managedFields and last-applied
// annotation are dropped. Like TrimComponent it trims typed Namespaces
// only.
func TrimNamespace(in any) (any, error) {
	if ns, ok := in.(*corev1.Namespace); ok {
		dropLastApplied(ns)
		ns.ManagedFields = nil
	}
	return in, nil
}

// Both transforms are toolscache.TransformFuncs.
var (
	_ toolscache.TransformFunc = TrimComponent
	_ toolscache.TransformFunc = TrimNamespace
)

// dropLastApplied removes the last-applied annotation, and the annotations
// with it when it was the only one.
func dropLastApplied(obj metav1.Object) {
	a := obj.GetAnnotations()
	if _, ok := a[LastAppliedAnnotation]; !ok {
		return
	}
	if len(a) == 1 {
		obj.SetAnnotations(nil)
		return
	}
	delete(a, LastAppliedAnnotation)
	obj.SetAnnotations(a)
}

// statusConditions are the condition keys of a managedFields entry's
// fieldsV1 set ("k:{\"type\":\"Ready\"}"), as ownedByOthers reads them.
type statusConditions struct {
	Status struct {
		Conditions map[string]json.RawMessage `json:"f:conditions"`
	} `json:"f:status"`
}

// conditionOwners keeps of entries what ownedByOthers reads: the status
// entries of other managers than FieldManager that own a condition, each
// with only its condition keys. It returns nil when none is left.
func conditionOwners(entries []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	var kept []metav1.ManagedFieldsEntry
	for _, f := range entries {
		if f.Manager == FieldManager || f.Subresource != "status" || f.FieldsV1 == nil {
			continue
		}
		var fields statusConditions
		if json.Unmarshal(f.FieldsV1.GetRawBytes(), &fields) != nil {
			kept = append(kept, f) // unreadable: ownedByOthers reads it as owning everything
			continue
		}
		raw, err := conditionKeys(fields)
		switch {
		case err != nil:
			kept = append(kept, f)
			continue
		case raw == nil:
			continue // owns no condition
		}
		kept = append(kept, metav1.ManagedFieldsEntry{
			Manager:     f.Manager,
			Operation:   f.Operation,
			APIVersion:  f.APIVersion,
			FieldsType:  f.FieldsType,
			FieldsV1:    metav1.NewFieldsV1(string(raw)),
			Subresource: f.Subresource,
		})
	}
	return kept
}

// conditionKeys encodes a fieldsV1 set of the condition keys of fields
// alone (k:{"type":…}, not the list's own "."), each owning nothing below
// it; nil when fields owns no condition.
func conditionKeys(fields statusConditions) ([]byte, error) {
	var trimmed statusConditions
	for k := range fields.Status.Conditions {
		if !strings.HasPrefix(k, "k:") {
			continue
		}
		if trimmed.Status.Conditions == nil {
			trimmed.Status.Conditions = map[string]json.RawMessage{}
		}
		trimmed.Status.Conditions[k] = json.RawMessage("{}")
	}
	if trimmed.Status.Conditions == nil {
		return nil, nil
	}
	raw, err := json.Marshal(trimmed)
	if err != nil {
		return nil, fmt.Errorf("encode the status conditions' owners: %w", err)
	}
	return raw, nil
}
