package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ReviewRequest describes an admission request made offline, by `fencegate
// eval` or a test, as the API server would send it.
type ReviewRequest struct {
	// UID identifies the request; empty means "offline".
	UID string
	// Operation is CREATE, UPDATE or DELETE.
	Operation string
	// Object is the object as it would be stored (JSON); empty for DELETE.
	Object []byte
	// OldObject is the stored object an UPDATE or DELETE replaces (JSON).
	OldObject []byte
	// SubResource is "status" for a status update, else empty.
	SubResource string
	// Namespace is the request's namespace when the object names none (as
	// with kubectl's -n).
	Namespace string
	// Username and Groups are the requesting user.
	Username string
	Groups   []string
	// DryRun marks a request that persists nothing.
	DryRun bool
	// FieldManager is the request's field manager (its options), as a
	// writer names itself: fencegate's hold controller is fencegate-hold.
	FieldManager string
}

// BuildReview builds the AdmissionReview (admission.k8s.io/v1) the API server
// would send for r. The kind, resource, namespace and name are read from the
// object (for DELETE, the old object). Objects of kind Component map to the
// resource components; other kinds to their lowercase plural guess.
func BuildReview(r ReviewRequest) ([]byte, error) {
	op := admissionv1.Operation(strings.ToUpper(r.Operation))
	subject := r.Object
	switch op {
	case admissionv1.Create, admissionv1.Update, admissionv1.Connect:
		if len(r.Object) == 0 {
			return nil, fmt.Errorf("a %s request needs the object", op)
		}
	case admissionv1.Delete:
		if len(r.OldObject) == 0 {
			return nil, errors.New("a DELETE request needs the object being deleted (the old object)")
		}
		subject = r.OldObject
	default:
		return nil, fmt.Errorf("operation %q: want CREATE, UPDATE, DELETE or CONNECT", r.Operation)
	}
	var meta struct {
		APIVersion string            `json:"apiVersion"`
		Kind       string            `json:"kind"`
		Metadata   metav1.ObjectMeta `json:"metadata"`
	}
	if err := json.Unmarshal(subject, &meta); err != nil {
		return nil, fmt.Errorf("read the object's apiVersion, kind and metadata: %w", err)
	}
	gv, err := schema.ParseGroupVersion(meta.APIVersion)
	if err != nil || meta.APIVersion == "" || meta.Kind == "" {
		return nil, fmt.Errorf("the object needs an apiVersion (group/version) and a kind, got apiVersion %q kind %q", meta.APIVersion, meta.Kind)
	}
	if meta.Metadata.Name == "" {
		return nil, errors.New("the object needs metadata.name")
	}
	namespace := meta.Metadata.Namespace
	if namespace == "" {
		namespace = r.Namespace
	}
	uid := r.UID
	if uid == "" {
		uid = "offline"
	}
	gvk := gv.WithKind(meta.Kind)
	resource := gv.WithResource(strings.ToLower(meta.Kind) + "s")
	dryRun := r.DryRun
	review := admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Request: &admissionv1.AdmissionRequest{
			UID:                types.UID(uid),
			Kind:               metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
			Resource:           metav1.GroupVersionResource{Group: resource.Group, Version: resource.Version, Resource: resource.Resource},
			SubResource:        r.SubResource,
			RequestKind:        &metav1.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
			RequestResource:    &metav1.GroupVersionResource{Group: resource.Group, Version: resource.Version, Resource: resource.Resource},
			RequestSubResource: r.SubResource,
			Name:               meta.Metadata.Name,
			Namespace:          namespace,
			Operation:          op,
			UserInfo:           authenticationv1.UserInfo{Username: r.Username, Groups: r.Groups},
			Object:             runtime.RawExtension{Raw: r.Object},
			OldObject:          runtime.RawExtension{Raw: r.OldObject},
			DryRun:             &dryRun,
			Options:            options(op, r.FieldManager),
		},
	}
	body, err := json.Marshal(review)
	if err != nil {
		return nil, fmt.Errorf("encode AdmissionReview: %w", err)
	}
	return body, nil
}

// options are the request's options as the API server sends them
// (CreateOptions, UpdateOptions, DeleteOptions), with the field manager of
// a create or update.
func options(op admissionv1.Operation, fieldManager string) runtime.RawExtension {
	var opts any
	switch op {
	case admissionv1.Create:
		opts = metav1.CreateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "CreateOptions"}, FieldManager: fieldManager}
	case admissionv1.Update:
		opts = metav1.UpdateOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "UpdateOptions"}, FieldManager: fieldManager}
	case admissionv1.Delete:
		opts = metav1.DeleteOptions{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "DeleteOptions"}}
	default:
		return runtime.RawExtension{}
	}
	raw, _ := json.Marshal(opts) // options of plain fields always encode
	return runtime.RawExtension{Raw: raw}
}
