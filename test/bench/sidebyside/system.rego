# The AdmissionReview envelope of OPA's Kubernetes admission-control
# tutorial, around fencegate's shipped admission decision, so that OPA's own
# server answers exactly what fencegate's webhook answers: the same decision,
# the same denial message, the same JSONPatch.
#
# The validating webhook posts to OPA's default decision (POST /, which is
# data.system.main); the mutating webhook to POST /v0/data/system/mutate,
# OPA's webhook-compatible API (the body is the input, the answer the
# document).
package system

import data.fencegate.admission

main := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": validation,
}

mutate := {
	"apiVersion": "admission.k8s.io/v1",
	"kind": "AdmissionReview",
	"response": mutation,
}

decision := admission.decision

default warned := {}

warned := {"warnings": decision.warnings} if count(decision.warnings) > 0

validation := object.union(warned, {"uid": input.request.uid, "allowed": true}) if decision.allowed

validation := object.union(warned, {
	"uid": input.request.uid,
	"allowed": false,
	"status": {
		"status": "Failure",
		"code": 403,
		"reason": "Forbidden",
		"message": concat("; ", decision.reasons),
	},
}) if {
	not decision.allowed
}

# The mutating webhook denies what validation denies, as fencegate's does.
mutation := validation if not decision.allowed

mutation := object.union(warned, {"uid": input.request.uid, "allowed": true}) if {
	decision.allowed
	count(decision.patch) == 0
}

mutation := object.union(warned, {
	"uid": input.request.uid,
	"allowed": true,
	"patchType": "JSONPatch",
	"patch": base64.encode(json.marshal(decision.patch)),
}) if {
	decision.allowed
	count(decision.patch) > 0
}
