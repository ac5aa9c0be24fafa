package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types that fencegate sets on a Fence.
const (
	// ConditionHolding is True while this cluster holds the fence.
	ConditionHolding = "Holding"
	// ConditionEnforced is True once every fencegate replica of this
	// cluster applies the current fence state and the controller has
	// re-marked every Component for it.
	ConditionEnforced = "Enforced"
)

// ConditionQuiesced is True while this cluster does not hold the fence and
// every actuator object that fencegate holds here has gone quiet: its hold
// is set and its actuator reports nothing still running. False while this
// cluster holds the fence (reason FenceHeld), while holds are still being
// applied for the current state (HoldsPending) or while a held object still
// runs (NotQuiet); Unknown when no kinds are held here (NoHeldKinds).
const ConditionQuiesced = "Quiesced"

// Reasons of the Quiesced condition.
const (
	// ReasonQuiesced: every held object has gone quiet.
	ReasonQuiesced = "Quiesced"
	// ReasonNotQuiet: a held object's actuator still runs something.
	ReasonNotQuiet = "NotQuiet"
	// ReasonHoldsPending: not every object of the held kinds has been
	// decided for the current fence state yet.
	ReasonHoldsPending = "HoldsPending"
	// ReasonNoHeldKinds: no kinds of actuators are held on this cluster,
	// so nothing tells whether it has gone quiet.
	ReasonNoHeldKinds = "NoHeldKinds"
)

// Reasons of a Fence's conditions that a Component's SourceConflict does not
// use; the others (FenceHeld, ClusterFenced, FenceAcquiring, FenceUnknown)
// are shared.
const (
	// ReasonEpochRegressed: this cluster declared a lower epoch than it once
	// did (a restored or misconfigured cluster).
	ReasonEpochRegressed = "EpochRegressed"
	// ReasonPermissionDenied: the authority does not let this cluster's
	// identity declare as this cluster.
	ReasonPermissionDenied = "PermissionDenied"
	// ReasonClusterRestored: the authority refuses this cluster as a copy
	// restored from a backup of it (CLUSTER_RESTORED); it admits nothing
	// until an operator raises its epoch or forgets the cluster.
	ReasonClusterRestored = "ClusterRestored"
	// ReasonEpochStepTooLarge: the authority refused the epoch asked for
	// as too far above the domain's highest (EPOCH_STEP_TOO_LARGE); the
	// cluster goes on declaring the last epoch it had accepted.
	ReasonEpochStepTooLarge = "EpochStepTooLarge"
	// ReasonEpochAccepted: the authority accepted the epoch asked for.
	ReasonEpochAccepted = "EpochAccepted"
	// ReasonEpochBelowAccepted: the epoch asked for is below the one this
	// cluster already declares and had accepted (a Fence made again by
	// hand, or a spec.epoch lowered past status.epoch); an epoch only
	// rises, so the cluster goes on declaring the higher one.
	ReasonEpochBelowAccepted = "EpochBelowAccepted"
	// ReasonEpochPending: the authority has not accepted the epoch asked
	// for yet: its answer is on the way, or the fence state does not tell
	// (the authority is unreachable, the cluster looks restored, …).
	ReasonEpochPending = "EpochPending"
)

// ConditionEpochAccepted is True while the authority accepts the epoch
// this cluster asks for (max(--epoch, spec.epoch)); False with reason
// EpochStepTooLarge while it refuses it and the cluster goes on declaring
// the last epoch it had accepted (status.epoch), EpochBelowAccepted while
// the epoch asked for is below that one, or EpochRegressed; Unknown with
// reason EpochPending until the authority's answer tells.
const ConditionEpochAccepted = "EpochAccepted"

// FenceSpec is what an operator asks of this cluster's fence.
type FenceSpec struct {
	// Epoch is the epoch this cluster declares when it is above the epoch
	// fencegate is started with (--epoch, the chart's epoch value), which
	// stays the floor. Raising it above the holder's epoch fails over to
	// this cluster at once, without a restart. It may only rise, but for
	// one case: a value the authority never accepted (above status.epoch,
	// say a typo the authority refused as EpochStepTooLarge) may be
	// lowered back to status.epoch or above. Without status.epoch it
	// cannot be lowered.
	// +optional
	// +kubebuilder:validation:Minimum=1
	Epoch *int64 `json:"epoch,omitempty"`
}

// FenceCluster names a cluster in the fence and an epoch it declared.
type FenceCluster struct {
	// Name is the cluster's name.
	Name string `json:"name"`
	// UID is the UID of the cluster's kube-system Namespace.
	// +optional
	UID string `json:"uid,omitempty"`
	// Epoch is the epoch the cluster declared.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
}

// FenceComponents counts the Components of this cluster as the controller
// last marked them.
type FenceComponents struct {
	// Held is how many Components are held (SourceConflict=True).
	Held int32 `json:"held"`
	// Total is how many Components the controller marked.
	Total int32 `json:"total"`
	// Summary is "held/total held", for the COMPONENTS column.
	// +optional
	Summary string `json:"summary,omitempty"`
}

// FenceHeld counts the actuator objects fencegate holds on this cluster, as
// the hold controller last decided them for the current fence state.
type FenceHeld struct {
	// Held is how many objects are held.
	Held int32 `json:"held"`
	// Quiet is how many held objects have gone quiet.
	Quiet int32 `json:"quiet"`
	// Summary is "quiet/held quiet", for the HELD column.
	// +optional
	Summary string `json:"summary,omitempty"`
	// Kinds counts them per kind.
	// +optional
	// +listType=map
	// +listMapKey=kind
	Kinds []FenceHeldKind `json:"kinds,omitempty"`
}

// FenceHeldKind counts the held objects of one kind.
type FenceHeldKind struct {
	// Kind is the kind, as Kind.group (CronJob.batch).
	Kind string `json:"kind"`
	// Held is how many objects of the kind are held.
	Held int32 `json:"held"`
	// Quiet is how many of them have gone quiet.
	Quiet int32 `json:"quiet"`
}

// FenceInstance is what one fencegate replica (an instance of this cluster)
// applies: each replica writes its own entry, under a field manager of its
// own, when what it applies changes.
type FenceInstance struct {
	// Name is the instance's name (the pod name).
	Name string `json:"name"`
	// State is the fence status this instance's admission webhook answers
	// from.
	State string `json:"state"`
	// Epoch is the epoch this instance declares.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// Holder names the holder this instance knows of, as "name@epoch".
	// +optional
	Holder string `json:"holder,omitempty"`
	// Token is the fencing token this instance stamps while it holds the
	// fence.
	// +optional
	Token int64 `json:"token,omitempty"`
	// Since is when this instance started to apply State.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// ClusterGeneration is the generation of this cluster that this
	// instance's agent presents: the leader writes the highest of the
	// running instances' into status.clusterGeneration, so that an
	// instance refused as restored (one cut off for a while, the leader
	// included) learns the current one from its peers.
	// +optional
	ClusterGeneration int64 `json:"clusterGeneration,omitempty"`
}

// ClusterFenceStatus is the fence as this cluster sees and enforces it.
type ClusterFenceStatus struct {
	// Conditions: Holding, Enforced, EpochAccepted and Quiesced.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the metadata.generation whose spec.epoch this
	// cluster declares (or exceeds).
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// State is this cluster's fence status: active, fenced,
	// epoch_regressed, acquiring, unknown or unsupported.
	// +optional
	State string `json:"state,omitempty"`
	// FenceReason is the machine-readable reason behind State: the
	// authority's refusal (CLUSTER_FENCED, PERMISSION_DENIED, …) or the
	// agent's own (AUTHORITY_UNREACHABLE, LEASE_EXPIRED, …).
	// +optional
	FenceReason string `json:"fenceReason,omitempty"`
	// Cluster is this cluster: its name and UID in the fence, and the epoch
	// it declares.
	// +optional
	Cluster *FenceCluster `json:"cluster,omitempty"`
	// Epoch is the epoch this cluster declares and the authority last
	// accepted: while a higher epoch asked for is refused (EpochAccepted
	// False), it stays the one accepted before, and it is never an epoch
	// the authority refused for its step (a leader that started at such an
	// epoch leaves it as it was). A spec.epoch above it was never accepted
	// and may be lowered back to it.
	// +optional
	Epoch int64 `json:"epoch,omitempty"`
	// Holder is the cluster that holds the fence, as this cluster last
	// heard from the authority.
	// +optional
	Holder *FenceCluster `json:"holder,omitempty"`
	// Token is the holder's fencing token while this cluster holds the
	// fence; it grows each time the fence changes hands.
	// +optional
	Token int64 `json:"token,omitempty"`
	// Pending is a takeover by a higher epoch that waits for the holder to
	// release the fence or for its leases to end.
	// +optional
	Pending *FenceCluster `json:"pending,omitempty"`
	// LeaseExpiresAt is, while a takeover is pending, when the last lease
	// of the holder that has not been released ends: the takeover is
	// granted then at the latest. Heartbeats renew leases without writing
	// this object, so it is not shown otherwise.
	// +optional
	LeaseExpiresAt *metav1.Time `json:"leaseExpiresAt,omitempty"`
	// Since is when this cluster entered State.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
	// LastDeclaration is when the declaration was sent whose answer changed
	// this status last. Heartbeats that change nothing do not write it;
	// fencegate_fence_last_answer_timestamp_seconds tells the latest one.
	// +optional
	LastDeclaration *metav1.Time `json:"lastDeclaration,omitempty"`
	// Components counts this cluster's Components as the controller marked
	// them.
	// +optional
	Components *FenceComponents `json:"components,omitempty"`
	// Held counts the actuator objects fencegate holds on this cluster
	// (none while it holds the fence), written once every object of the
	// held kinds is decided for the current state.
	// +optional
	Held *FenceHeld `json:"held,omitempty"`

	// ClusterGeneration is this cluster's generation as the authority last
	// gave it to the cluster: the highest that the leader's agent and the
	// running instances' agents present. A process of this cluster
	// presents it in its first declaration, and one refused as restored
	// adopts it; one that presents a generation the authority has moved
	// past runs in a copy restored from a backup (ClusterRestored).
	// +optional
	ClusterGeneration int64 `json:"clusterGeneration,omitempty"`

	// Instances lists what each running fencegate replica applies, one
	// entry per replica, each written by that replica.
	// +optional
	// +listType=map
	// +listMapKey=name
	Instances []FenceInstance `json:"instances,omitempty"`
}

// Fence is this cluster's view of one fence domain, named after the domain:
// fencegate writes the status; raising spec.epoch fails over to this
// cluster.
//
// The rule on spec.epoch sits at the root because it reads status.epoch,
// the epoch the authority accepted: a rule on spec sees spec only. It
// checks updates only; fencegate itself keeps a Fence made again from
// starting below the epoch its agents had accepted. Lowering needs
// status.epoch: without it (a Fence just made again, or whose leader never
// had an epoch accepted) nothing tells a typo from an accepted epoch, and
// lowering that one would make the cluster declare less than it once did.
//
// +kubebuilder:validation:XValidation:rule="!oldSelf.?spec.?epoch.hasValue() || (self.?spec.?epoch.hasValue() && (self.spec.epoch >= oldSelf.spec.epoch || oldSelf.?status.?epoch.orValue(0) > 0 && oldSelf.spec.epoch > oldSelf.status.epoch && self.spec.epoch >= oldSelf.status.epoch))",fieldPath=".spec.epoch",message="spec.epoch may only rise: the authority refuses a cluster that declares less than it once did (epoch_regressed). The one exception undoes a typo: a spec.epoch the authority never accepted (above status.epoch, the epoch it accepted last) may be lowered, to status.epoch or above, once status.epoch is written (until then, delete the Fence: fencegate makes it again without an epoch the authority refused). spec.epoch cannot be unset. To fail over to this cluster, raise it above the holder's epoch; to fail back, raise the other cluster's"
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Epoch",type=integer,JSONPath=`.status.epoch`
// +kubebuilder:printcolumn:name="Holder",type=string,JSONPath=`.status.holder.name`
// +kubebuilder:printcolumn:name="Token",type=integer,JSONPath=`.status.token`
// +kubebuilder:printcolumn:name="Components",type=string,JSONPath=`.status.components.summary`
// +kubebuilder:printcolumn:name="Held",type=string,JSONPath=`.status.held.summary`
// +kubebuilder:printcolumn:name="Holding",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Holding")].status`
// +kubebuilder:printcolumn:name="Enforced",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Enforced")].status`
// +kubebuilder:printcolumn:name="Quiesced",type=string,priority=1,JSONPath=`.status.conditions[?(@.type=="Quiesced")].status`
// +kubebuilder:printcolumn:name="Holder Epoch",type=integer,priority=1,JSONPath=`.status.holder.epoch`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Fence struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +kubebuilder:default={}
	Spec   FenceSpec          `json:"spec,omitempty"`
	Status ClusterFenceStatus `json:"status,omitempty"`
}

// FenceList is a list of Fences.
//
// +kubebuilder:object:root=true
type FenceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Fence `json:"items"`
}
