package rpctypes

import (
	"errors"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo of every refusal.
const ErrorDomain = "fence.fencegate.dev"

// The reasons of refusals, in google.rpc.ErrorInfo.
const (
	// ReasonClusterFenced means another cluster holds the fence, a takeover
	// by a higher epoch is pending, or the declaring instance's lease was
	// revoked (metadata MetadataFenceReason says which).
	ReasonClusterFenced = "CLUSTER_FENCED"
	// ReasonEpochRegressed means the cluster once declared a higher epoch
	// than it declares now.
	ReasonEpochRegressed = "CLUSTER_EPOCH_REGRESSED"
	// ReasonAcquiring means the takeover is accepted but an instance of the
	// previous holder has neither released nor seen its lease end yet; see
	// MetadataRetryAfterMs.
	ReasonAcquiring = "FENCE_ACQUIRING"
	// ReasonPermissionDenied means the caller's identity may not make the
	// call (a PermissionDenied error).
	ReasonPermissionDenied = "PERMISSION_DENIED"
	// ReasonEpochStepTooLarge means the declared epoch is further above the
	// highest epoch of the domain than the authority allows; nothing was
	// recorded.
	ReasonEpochStepTooLarge = "EPOCH_STEP_TOO_LARGE"
	// ReasonNotHolder means an operator action names a cluster or instance
	// that holds no lease of the fence.
	ReasonNotHolder = "NOT_HOLDER"
	// ReasonClusterInUse means a cluster's record cannot be forgotten while
	// it holds the fence or is taking it over.
	ReasonClusterInUse = "CLUSTER_IN_USE"
	// ReasonClusterRestored means the declaring instance presents a
	// cluster generation the authority has moved past: it runs in a copy of
	// the cluster restored from a backup, which must not act as the
	// cluster until an operator raises its epoch or forgets the cluster.
	ReasonClusterRestored = "CLUSTER_RESTORED"
)

// The values of MetadataFenceReason: why a declaration is CLUSTER_FENCED.
const (
	// FenceReasonHeldByOther: another cluster holds the fence at an epoch at
	// or above the declared one.
	FenceReasonHeldByOther = "HELD_BY_OTHER"
	// FenceReasonTakeoverPending: the declaring cluster holds the fence, but
	// a takeover by a higher epoch is pending.
	FenceReasonTakeoverPending = "TAKEOVER_PENDING"
	// FenceReasonOtherTakeoverPending: a third cluster's takeover at an epoch
	// at or above the declared one is pending.
	FenceReasonOtherTakeoverPending = "OTHER_TAKEOVER_PENDING"
	// FenceReasonRevoked: an operator revoked the declaring instance's lease
	// (or every lease of its cluster); it cannot be renewed.
	FenceReasonRevoked = "REVOKED"
)

// The metadata keys of refusals.
const (
	MetadataDomain         = "domain"
	MetadataHolderCluster  = "holder_cluster"
	MetadataHolderUID      = "holder_uid"
	MetadataHolderEpoch    = "holder_epoch"
	MetadataDeclaredEpoch  = "declared_epoch"
	MetadataRetryAfterMs   = "retry_after_ms"
	MetadataPendingCluster = "pending_cluster"
	MetadataPendingUID     = "pending_uid"
	MetadataPendingEpoch   = "pending_epoch"
	MetadataHighestEpoch   = "highest_epoch"
	// MetadataFenceReason says why a CLUSTER_FENCED refusal fences (one of
	// the FenceReason values).
	MetadataFenceReason = "reason"
	// MetadataRevokedBy names the identity that revoked a lease.
	MetadataRevokedBy = "revoked_by"
	// MetadataMaxEpochStep is the largest step above the highest epoch of
	// the domain that the authority accepts.
	MetadataMaxEpochStep = "max_epoch_step"
	// MetadataIdentity is the caller's identity as the authority saw it.
	MetadataIdentity = "identity"
	// MetadataMethod is the full gRPC method of a refused call.
	MetadataMethod = "method"
	// MetadataCluster is the cluster a refused call acts as or on.
	MetadataCluster = "cluster"
	// MetadataClusterGeneration is the declaring cluster's current
	// generation, on refusals of declarations that presented a current one.
	MetadataClusterGeneration = "cluster_generation"
	// MetadataPresentedGeneration is the generation a CLUSTER_RESTORED
	// declaration presented.
	MetadataPresentedGeneration = "presented_generation"
	// MetadataBoundCluster names the cluster a UID is bound to, on the
	// PermissionDenied refusal of a declaration that names another.
	MetadataBoundCluster = "bound_cluster"
)

// Refusal returns a gRPC error with the given code and message that carries
// an ErrorInfo of the fence domain.
func Refusal(code codes.Code, reason, message string, metadata map[string]string) error {
	st, err := status.New(code, message).WithDetails(&errdetails.ErrorInfo{
		Reason:   reason,
		Domain:   ErrorDomain,
		Metadata: metadata,
	})
	if err != nil {
		return status.Errorf(codes.Internal, "attach error details to %q: %v", message, err)
	}
	return st.Err()
}

// Status finds the gRPC status in err or anything it wraps, so that
// interceptors or client wrappers that add context do not hide a refusal.
func Status(err error) (*status.Status, bool) {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) || se.GRPCStatus() == nil {
		return nil, false
	}
	return se.GRPCStatus(), true
}

// ErrorInfo returns the fence domain's ErrorInfo of err, or nil when err
// carries none.
func ErrorInfo(err error) *errdetails.ErrorInfo {
	st, ok := Status(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == ErrorDomain {
			return info
		}
	}
	return nil
}

// Uint reads a numeric metadata value; absent or malformed reads as 0,
// which messages treat as "not said".
func Uint(md map[string]string, key string) uint64 {
	n, err := strconv.ParseUint(md[key], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// ResultLabel is the metrics label of a call refused with reason, the same
// in the authority's and the agent's metrics: "fenced", "epoch_regressed",
// "acquiring", "permission_denied", "epoch_step_too_large", and so on.
func ResultLabel(reason string) string {
	switch reason {
	case ReasonClusterFenced:
		return "fenced"
	case ReasonEpochRegressed:
		return "epoch_regressed"
	}
	return strings.ToLower(strings.TrimPrefix(reason, "FENCE_"))
}
