package engine

import "encoding/json"

// AdmissionDecision is the result of data.fencegate.admission.decision.
type AdmissionDecision struct {
	// Allowed says whether the request may proceed.
	Allowed bool `json:"allowed"`
	// Reason is a denial's machine-readable reason, which the webhook gives
	// the API server as the status reason (STALE_FENCING_TOKEN); "" for
	// the default, Forbidden.
	Reason string `json:"reason,omitempty"`
	// Reasons explain a denial to a person.
	Reasons []string `json:"reasons"`
	// Warnings are shown to the client (kubectl prints them).
	Warnings []string `json:"warnings"`
	// Patch is a JSONPatch for the mutating endpoint.
	Patch []PatchOperation `json:"patch"`
	// Violations are the denials that enforcement "warn" or "dryrun" let
	// through; the decision log records them.
	Violations []string `json:"violations,omitempty"`
}

// PatchOperation is one RFC 6902 JSONPatch operation.
type PatchOperation struct {
	// Op is the operation: add, remove, replace or test.
	Op string `json:"op"`
	// Path is the JSON pointer the operation applies to.
	Path string `json:"path"`
	// Value is the operation's value (add, replace, test).
	Value any `json:"value,omitempty"`
}

// MarshalJSON writes the value of add, replace and test operations even when
// it is null, which RFC 6902 requires; the other operations have none.
func (p PatchOperation) MarshalJSON() ([]byte, error) {
	type plain PatchOperation
	if p.Value == nil && (p.Op == "add" || p.Op == "replace" || p.Op == "test") {
		return json.Marshal(struct {
			Op    string `json:"op"`
			Path  string `json:"path"`
			Value any    `json:"value"`
		}{p.Op, p.Path, nil})
	}
	return json.Marshal(plain(p))
}

// ReconcileDecision is the result of data.fencegate.reconcile.decision.
type ReconcileDecision struct {
	// Hold is true while this cluster must not act on the Component.
	Hold bool `json:"hold"`
	// Reason is the SourceConflict condition's reason (ClusterFenced,
	// ClusterEpochRegressed, FenceAcquiring, FenceUnknown, or FenceHeld).
	Reason string `json:"reason"`
	// Message explains the decision to a person.
	Message string `json:"message"`
}
