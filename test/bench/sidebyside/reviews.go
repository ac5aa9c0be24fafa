package sidebyside

import (
	"encoding/json"
	"fmt"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fencegate/fencegate/api/v1alpha1"
)

// review is one AdmissionReview body that both servers are sent.
type review struct {
	// UID is the request's uid, which the answer must echo.
	UID string
	// Operation is CREATE or UPDATE.
	Operation admissionv1.Operation
	// Body is the AdmissionReview JSON.
	Body []byte
}

// reviewNamespace is the namespace of the reviews' Components. newBench
// creates it in both clusters: an API server admits nothing in a namespace
// that does not exist, and fencegate, finding it in no cache, would ask
// the API server for it on every review.
const reviewNamespace = "payments"

// The user the reviews come from: a GitOps controller applying Components,
// as in the clusters fencegate guards.
const (
	reviewUser   = "system:serviceaccount:argocd:argocd-application-controller"
	fieldManager = "argocd-controller"
)

// buildReviews returns n AdmissionReviews (admission.k8s.io/v1) as the API
// server sends them for Components of about 6 KB each: half CREATEs, half
// UPDATEs with the old object. Every review names a different Component and
// carries its own uid; the UPDATEs alternate between objects whose fence
// stamps are stale (a previous token) and objects that lost them (a
// replace), so that a cluster holding the fence patches every one of them.
func buildReviews(n int) ([]review, error) {
	if n < 2 {
		return nil, fmt.Errorf("need at least 2 reviews (a CREATE and an UPDATE), got %d", n)
	}
	reviews := make([]review, 0, n)
	for i := range n {
		name := fmt.Sprintf("billing-%03d", i)
		op := admissionv1.Create
		object := component(name, i, 1, "1.4.2", nil)
		var old []byte
		if i%2 == 1 {
			op = admissionv1.Update
			var stamps map[string]string
			if i%4 == 1 {
				stamps = map[string]string{"fencegate.dev/epoch": "1", "fencegate.dev/token": "1"}
			}
			object = component(name, i, 3, "1.5.0", stamps)
			old = component(name, i, 2, "1.4.2", map[string]string{"fencegate.dev/epoch": "1", "fencegate.dev/token": "1"})
		}
		uid := fmt.Sprintf("6f1c2a9e-%04x-4b7e-9a6a-%012x", i, 0x3b3f4f0e7c11+i)
		body, err := admissionReview(uid, name, op, object, old)
		if err != nil {
			return nil, err
		}
		reviews = append(reviews, review{UID: uid, Operation: op, Body: body})
	}
	return reviews, nil
}

// admissionReview encodes the AdmissionReview of one request.
func admissionReview(uid, name string, op admissionv1.Operation, object, old []byte) ([]byte, error) {
	gvk := metav1.GroupVersionKind{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Kind: "Component"}
	gvr := metav1.GroupVersionResource{Group: v1alpha1.GroupVersion.Group, Version: v1alpha1.GroupVersion.Version, Resource: "components"}
	options := map[string]any{"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1", "fieldManager": fieldManager}
	if op == admissionv1.Update {
		options["kind"] = "UpdateOptions"
	}
	rawOptions, err := json.Marshal(options)
	if err != nil {
		return nil, fmt.Errorf("encode request options: %w", err)
	}
	dryRun := false
	body, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:             types.UID(uid),
			Kind:            gvk,
			Resource:        gvr,
			RequestKind:     &gvk,
			RequestResource: &gvr,
			Name:            name,
			Namespace:       reviewNamespace,
			Operation:       op,
			UserInfo: authenticationv1.UserInfo{
				Username: reviewUser,
				UID:      "0d6c1f5e-8a43-4f0b-9b1e-2f4c8d7a6b90",
				Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:argocd", "system:authenticated"},
				Extra: map[string]authenticationv1.ExtraValue{
					"authentication.kubernetes.io/pod-name": {"argocd-application-controller-0"},
					"authentication.kubernetes.io/pod-uid":  {"a2f9d0c4-51b7-4c57-8f0e-6c3f2d1b9e84"},
				},
			},
			Object:    runtime.RawExtension{Raw: object},
			OldObject: runtime.RawExtension{Raw: old},
			DryRun:    &dryRun,
			Options:   runtime.RawExtension{Raw: rawOptions},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("encode the AdmissionReview of %s: %w", name, err)
	}
	return body, nil
}

// component encodes a Component as the API server stores it: labels,
// annotations (kubectl's last-applied configuration and GitOps tracking among
// them), managedFields of three managers, a spec with nested chart values and,
// once created, a status. generation > 1 makes it a stored object with a
// status; stamps are the fence annotations it carries, if any.
func component(name string, index, generation int, version string, stamps map[string]string) []byte {
	created := time.Date(2026, 1, 12, 9, 41, 7, 0, time.UTC)
	spec := v1alpha1.ComponentSpec{
		Enabled: true,
		Chart:   v1alpha1.ChartRef{Repository: "https://charts.example.com/payments", Name: "billing", Version: version},
		Values:  &apiextensionsv1.JSON{Raw: mustJSON(chartValues(name, version, generation))},
	}
	labels := map[string]string{
		"app.kubernetes.io/name":       "billing",
		"app.kubernetes.io/instance":   name,
		"app.kubernetes.io/part-of":    "payments",
		"app.kubernetes.io/managed-by": "argocd",
		"team":                         "payments-core",
		"cost-center":                  fmt.Sprintf("cc-%04d", 4100+index),
	}
	lastApplied := mustJSON(map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "Component",
		"metadata": map[string]any{"name": name, "namespace": reviewNamespace, "labels": labels},
		"spec":     spec,
	})
	annotations := map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": string(lastApplied) + "\n",
		"argocd.argoproj.io/tracking-id":                   "payments:components.fencegate.dev/Component:payments/" + name,
		"payments.example.com/owner":                       "billing-team@example.com",
		"payments.example.com/runbook":                     "https://runbooks.example.com/payments/billing",
	}
	for k, v := range stamps {
		annotations[k] = v
	}
	c := v1alpha1.Component{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Component"},
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Namespace:         reviewNamespace,
			UID:               types.UID(fmt.Sprintf("4f8c2a52-%04x-4b7e-9a6a-3b3f4f0e7c11", index)),
			ResourceVersion:   fmt.Sprintf("%d", 184467+index*10+generation),
			Generation:        int64(generation),
			CreationTimestamp: metav1.NewTime(created),
			Labels:            labels,
			Annotations:       annotations,
			ManagedFields:     managedFields(created, generation > 1),
		},
		Spec: spec,
	}
	if generation > 1 {
		since := metav1.NewTime(created.Add(time.Second))
		c.Status = v1alpha1.ComponentStatus{
			ObservedGeneration: int64(generation - 1),
			Conditions: []metav1.Condition{
				{Type: v1alpha1.ConditionSourceConflict, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonFenceHeld,
					Message: "cluster \"east\" holds the ownership fence", LastTransitionTime: since, ObservedGeneration: int64(generation - 1)},
				{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Deployed",
					Message: "release billing deployed", LastTransitionTime: since, ObservedGeneration: int64(generation - 1)},
			},
			Access: []v1alpha1.AccessEndpoint{{Name: "api", URL: "https://billing.payments.example.com"}},
			Fence:  &v1alpha1.FenceStatus{State: "active", Epoch: 1, Holder: "east@1", Token: 1, Since: &since},
		}
	}
	return mustJSON(c)
}

// chartValues are the free-form chart values of a Component.
func chartValues(name, version string, replicas int) map[string]any {
	env := make([]map[string]any, 0, 12)
	for i := range 12 {
		env = append(env, map[string]any{"name": fmt.Sprintf("BILLING_UPSTREAM_%d", i), "value": fmt.Sprintf("https://ledger-%d.payments.svc.cluster.local:8443", i)})
	}
	return map[string]any{
		"replicaCount": replicas,
		"image":        map[string]any{"repository": "registry.example.com/payments/billing", "tag": version, "pullPolicy": "IfNotPresent"},
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "250m", "memory": "256Mi"},
			"limits":   map[string]any{"cpu": "1", "memory": "512Mi"},
		},
		"env":                 env,
		"ingress":             map[string]any{"enabled": true, "host": name + ".payments.example.com", "tls": true},
		"podDisruptionBudget": map[string]any{"minAvailable": 1},
	}
}

// managedFields are those of a Component applied by a GitOps controller
// and, once stored, given a status by fencegate.
func managedFields(created time.Time, withStatus bool) []metav1.ManagedFieldsEntry {
	at := metav1.NewTime(created)
	entries := []metav1.ManagedFieldsEntry{{
		Manager: fieldManager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v1alpha1.GroupVersion.String(),
		Time: &at, FieldsType: "FieldsV1", FieldsV1: fieldsV1(map[string]any{
			"f:metadata": map[string]any{
				"f:annotations": map[string]any{".": map[string]any{}, "f:argocd.argoproj.io/tracking-id": map[string]any{},
					"f:kubectl.kubernetes.io/last-applied-configuration": map[string]any{},
					"f:payments.example.com/owner":                       map[string]any{}, "f:payments.example.com/runbook": map[string]any{}},
				"f:labels": map[string]any{".": map[string]any{}, "f:app.kubernetes.io/instance": map[string]any{},
					"f:app.kubernetes.io/managed-by": map[string]any{}, "f:app.kubernetes.io/name": map[string]any{},
					"f:app.kubernetes.io/part-of": map[string]any{}, "f:cost-center": map[string]any{}, "f:team": map[string]any{}},
			},
			"f:spec": map[string]any{
				".": map[string]any{}, "f:enabled": map[string]any{},
				"f:chart":  map[string]any{".": map[string]any{}, "f:name": map[string]any{}, "f:repository": map[string]any{}, "f:version": map[string]any{}},
				"f:values": map[string]any{},
			},
		}),
	}, {
		Manager: "fencegate", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v1alpha1.GroupVersion.String(),
		Time: &at, FieldsType: "FieldsV1", FieldsV1: fieldsV1(map[string]any{
			"f:metadata": map[string]any{"f:annotations": map[string]any{"f:fencegate.dev/epoch": map[string]any{}, "f:fencegate.dev/token": map[string]any{}}},
		}),
	}}
	if withStatus {
		entries = append(entries, metav1.ManagedFieldsEntry{
			Manager: "fencegate", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: v1alpha1.GroupVersion.String(),
			Time: &at, FieldsType: "FieldsV1", Subresource: "status", FieldsV1: fieldsV1(map[string]any{
				"f:status": map[string]any{".": map[string]any{}, "f:access": map[string]any{}, "f:conditions": map[string]any{},
					"f:fence": map[string]any{}, "f:observedGeneration": map[string]any{}},
			}),
		})
	}
	return entries
}

// mustJSON encodes values built here from strings, numbers, maps and API
// types, which always encode.
func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode a benchmark fixture: %v", err))
	}
	return b
}

// fieldsV1 encodes a managedFields entry's field set.
func fieldsV1(fields map[string]any) *metav1.FieldsV1 {
	return metav1.NewFieldsV1(string(mustJSON(fields)))
}
