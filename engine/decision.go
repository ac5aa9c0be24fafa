package engine

// AdmissionDecision is the result of data.fencegate.admission.decision.
type AdmissionDecision struct {
	// Allowed says whether the request may proceed.
	Allowed bool `json:"allowed"`
	// Reasons explain a denial to a person.
	Reasons []string `json:"reasons"`
	// Warnings are shown to the client (kubectl prints them).
	Warnings []string `json:"warnings"`
	// Patch is a JSONPatch for the mutating endpoint.
	Patch []PatchOperation `json:"patch"`
}

// PatchOperation is one RFC 6902 JSONPatch operation.
type PatchOperation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
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
