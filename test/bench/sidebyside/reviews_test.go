package sidebyside

import (
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"

	"github.com/fencegate/fencegate/api/v1alpha1"
)

// TestReviewsAreWhatAnAPIServerSends checks the bodies the servers are sent:
// admission.k8s.io/v1 AdmissionReviews of Components of about 6 KB, CREATEs
// without and UPDATEs with the old object, each with its own uid.
func TestReviewsAreWhatAnAPIServerSends(t *testing.T) {
	reviews, err := buildReviews(64)
	if err != nil {
		t.Fatal(err)
	}
	uids := map[string]bool{}
	ops := map[admissionv1.Operation]int{}
	for _, r := range reviews {
		var review admissionv1.AdmissionReview
		if err := json.Unmarshal(r.Body, &review); err != nil {
			t.Fatalf("%s: %v", r.UID, err)
		}
		req := review.Request
		if review.APIVersion != "admission.k8s.io/v1" || req == nil || string(req.UID) != r.UID || req.Operation != r.Operation {
			t.Fatalf("%s: not the AdmissionReview it claims to be: %s", r.UID, r.Body[:200])
		}
		var obj v1alpha1.Component
		if err := json.Unmarshal(req.Object.Raw, &obj); err != nil {
			t.Fatalf("%s: the object is not a Component: %v", r.UID, err)
		}
		size := len(req.Object.Raw)
		if size < 5000 || size > 7000 {
			t.Errorf("%s: the object is %d bytes, want about 6 KB", r.UID, size)
		}
		if len(obj.Labels) == 0 || len(obj.Annotations) == 0 || len(obj.ManagedFields) < 2 || obj.Spec.Values == nil {
			t.Errorf("%s: the Component lacks labels, annotations, managedFields or values", r.UID)
		}
		if hasOld := len(req.OldObject.Raw) > 0; hasOld != (r.Operation == admissionv1.Update) {
			t.Errorf("%s: a %s with old object %t", r.UID, r.Operation, hasOld)
		}
		uids[r.UID] = true
		ops[r.Operation]++
	}
	if len(uids) != len(reviews) {
		t.Errorf("%d distinct uids for %d reviews", len(uids), len(reviews))
	}
	if ops[admissionv1.Create] != 32 || ops[admissionv1.Update] != 32 {
		t.Errorf("operations %v, want 32 CREATE and 32 UPDATE", ops)
	}
	if _, err := buildReviews(1); err == nil {
		t.Error("one review cannot hold both a CREATE and an UPDATE")
	}
}
