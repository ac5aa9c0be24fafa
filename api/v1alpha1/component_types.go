package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types that fencegate sets on a Component.
const (
	// ConditionSourceConflict is True while this cluster must not act on the
	// Component because it does not hold the ownership fence.
	ConditionSourceConflict = "SourceConflict"
	// ConditionReady is False while the Component is held by the fence.
	ConditionReady = "Ready"
	// ConditionStalled is True while the Component is held by the fence and
	// cannot make progress until the fence returns.
	ConditionStalled = "Stalled"
)

// Reasons of the SourceConflict condition.
const (
	// ReasonFenceHeld: this cluster holds the fence; the Component may be
	// actuated.
	ReasonFenceHeld = "FenceHeld"
	// ReasonClusterFenced: another cluster holds the fence.
	ReasonClusterFenced = "ClusterFenced"
	// ReasonClusterEpochRegressed: this cluster declared a lower epoch than it
	// once did (a restored or misconfigured cluster).
	ReasonClusterEpochRegressed = "ClusterEpochRegressed"
	// ReasonFenceAcquiring: this cluster's takeover waits for the previous
	// holder's lease to end.
	ReasonFenceAcquiring = "FenceAcquiring"
	// ReasonFenceUnknown: the fence state is not known (no answer from the
	// authority yet, or the lease ran out without renewal).
	ReasonFenceUnknown = "FenceUnknown"
)

// ComponentSpec is the desired state of a Component.
type ComponentSpec struct {
	// Enabled says whether the Component should be actuated at all.
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// Chart names the Helm chart that actuates the Component.
	// +optional
	Chart ChartRef `json:"chart,omitzero"`

	// Values are free-form settings handed to the chart.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
}

// ChartRef names a Helm chart in a repository.
type ChartRef struct {
	// Repository is the chart repository URL.
	// +optional
	Repository string `json:"repository,omitempty"`
	// Name is the chart's name in the repository.
	// +optional
	Name string `json:"name,omitempty"`
	// Version is the chart version (a SemVer version or range).
	// +optional
	Version string `json:"version,omitempty"`
}

// ComponentStatus is the observed state of a Component.
type ComponentStatus struct {
	// Conditions: SourceConflict, Ready and Stalled, among others an
	// actuator may add.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the metadata.generation the status was computed
	// for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Access lists the endpoints the actuator published. It is cleared while
	// the cluster does not hold the fence, so that nothing routes to a copy
	// that must not act.
	// +optional
	// +listType=atomic
	Access []AccessEndpoint `json:"access,omitempty"`

	// Fence is the ownership fence as this cluster last saw it.
	// +optional
	Fence *FenceStatus `json:"fence,omitempty"`
}

// AccessEndpoint is one endpoint where the actuated Component can be reached.
type AccessEndpoint struct {
	// Name identifies the endpoint.
	Name string `json:"name"`
	// URL is where the endpoint is reached.
	URL string `json:"url"`
}

// FenceStatus is the ownership fence as seen by this cluster.
type FenceStatus struct {
	// State is this cluster's fence status: active, fenced, epoch_regressed,
	// acquiring, unknown or unsupported.
	State string `json:"state"`
	// Epoch is the epoch this cluster declares.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// Holder names the cluster that holds the fence, as "name@epoch".
	// +optional
	Holder string `json:"holder,omitempty"`
	// Token is the fencing token of the current holder; it grows each time
	// the fence changes hands.
	// +optional
	Token int64 `json:"token,omitempty"`
	// Since is when this cluster entered State.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// Component is a workload that only the cluster holding the ownership fence may
// change or actuate.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=comp
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Fenced",type=string,JSONPath=`.status.conditions[?(@.type=="SourceConflict")].status`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.fence.epoch`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.fence.holder`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Component struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ComponentSpec   `json:"spec,omitempty"`
	Status ComponentStatus `json:"status,omitempty"`
}

// ComponentList is a list of Components.
//
// +kubebuilder:object:root=true
type ComponentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Component `json:"items"`
}
