package fenceagent

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

// answerKind is what one declaration's outcome means for the fence status.
type answerKind int

const (
	granted answerKind = iota
	refusedFenced
	refusedRegressed
	refusedAcquiring
	// refusedPermission: the authority does not let this agent's identity
	// declare as this cluster.
	refusedPermission
	// refusedStep: EPOCH_STEP_TOO_LARGE, the epoch is too far above the
	// domain's highest; nothing was recorded.
	refusedStep
	// refusedRestored: CLUSTER_RESTORED, the agent presents a generation
	// of its cluster the authority has moved past.
	refusedRestored
	// refusedOther: another refusal with a reason of the fence domain: the
	// request cannot succeed as it is.
	refusedOther
	unsupported
	transient
	unexpected
)

// answerKinds lists every kind, for the metrics.
var answerKinds = []answerKind{granted, refusedFenced, refusedRegressed, refusedAcquiring, refusedPermission, refusedStep, refusedRestored, refusedOther, unsupported, transient, unexpected}

// refusalKinds are the ErrorInfo reasons the agent tells apart, with the
// kind each one is; any other reason is refusedOther. What each kind leads
// to is rules.next's.
var refusalKinds = map[string]answerKind{
	rpctypes.ReasonClusterFenced:     refusedFenced,
	rpctypes.ReasonEpochRegressed:    refusedRegressed,
	rpctypes.ReasonAcquiring:         refusedAcquiring,
	rpctypes.ReasonPermissionDenied:  refusedPermission,
	rpctypes.ReasonEpochStepTooLarge: refusedStep,
	rpctypes.ReasonClusterRestored:   refusedRestored,
}

// accepted reports whether the authority took a declaration answered so:
// it recorded the epoch and answered with a fence status and the cluster's
// generation. A step refusal recorded nothing, and a restored copy's
// refusal names a generation it must not present.
func (k answerKind) accepted() bool {
	return k == granted || k == refusedFenced || k == refusedAcquiring
}

// result is the metric label of each kind; refusals are labelled as the
// authority labels them.
func (k answerKind) result() string {
	switch k {
	case refusedFenced:
		return rpctypes.ResultLabel(rpctypes.ReasonClusterFenced)
	case refusedRegressed:
		return rpctypes.ResultLabel(rpctypes.ReasonEpochRegressed)
	case refusedAcquiring:
		return rpctypes.ResultLabel(rpctypes.ReasonAcquiring)
	case refusedPermission:
		return rpctypes.ResultLabel(rpctypes.ReasonPermissionDenied)
	}
	// The step and restored refusals keep the "refused" label they had as
	// refusals of no kind of their own, so that the metric's series stay.
	return [...]string{granted: "ok", refusedStep: "refused", refusedRestored: "refused", refusedOther: "refused", unsupported: "unsupported", transient: "transient", unexpected: "error"}[k]
}

// answer is one declaration's outcome, decoded from the response or the gRPC
// error: a value, so that the state it leads to is a pure function of it.
type answer struct {
	kind answerKind
	// holder is the holder named by the authority (a grant names this
	// cluster; a refusal's ErrorInfo names the holder).
	holder fencestate.Cluster
	// token is the fencing token of a grant.
	token uint64
	// leaseTTL is the length of a granted lease.
	leaseTTL time.Duration
	// leaseID is the declaration_id of the declaration that got a granted
	// lease (0: the authority names none), and leaseSent its send, from
	// which the lease counts (see result.leaseFrom).
	leaseID   uint64
	leaseSent time.Time
	// grant is how the holder a grant names got the fence (first,
	// after_release, after_expiry; empty for a record older than the
	// field), and acquired when, by the authority's clock.
	grant    string
	acquired time.Time
	// retryAfter is FENCE_ACQUIRING's retry_after_ms.
	retryAfter time.Duration
	// highestEpoch is, for CLUSTER_EPOCH_REGRESSED, the highest epoch this
	// cluster declared before, and for EPOCH_STEP_TOO_LARGE the domain's
	// highest epoch; 0 when not said.
	highestEpoch uint64
	// maxEpochStep is EPOCH_STEP_TOO_LARGE's largest step above
	// highestEpoch; 0 when not said.
	maxEpochStep uint64
	// generation is the cluster's current generation as the authority
	// gives it (a grant's, or a refusal's metadata); 0 when not said. It
	// is adopted only from accepted answers.
	generation uint64
	// presentedGeneration is the generation a CLUSTER_RESTORED refusal
	// says the declaration presented.
	presentedGeneration uint64
	// reason is the ErrorInfo reason or the agent's reason.
	reason string
	// fenceReason says why a CLUSTER_FENCED refusal fences (REVOKED, say).
	fenceReason string
	// identity is this agent's identity as a PERMISSION_DENIED refusal
	// names it.
	identity string
	// err is the gRPC error, for every kind but granted.
	err error
}

// grantAfterExpiry is the grant kind of a fence granted once the previous
// holder's lease ended without a release.
const grantAfterExpiry = "after_expiry"

// decode turns a DeclareClusterEpoch result into an answer. The gRPC status
// is found also when the error is wrapped, so that interceptors or client
// wrappers that add context do not turn a refusal into an unknown error.
func decode(resp *fencev1.DeclareClusterEpochResponse, err error) answer {
	if err == nil {
		a := answer{kind: granted, token: resp.GetToken(), leaseTTL: resp.GetLeaseTtl().AsDuration(), leaseID: resp.GetLeaseDeclarationId(), generation: resp.GetClusterGeneration()}
		if h := resp.GetHolder(); h != nil {
			a.holder = fencestate.Cluster{Name: h.GetClusterName(), UID: h.GetClusterUid(), Epoch: h.GetEpoch()}
			a.grant = h.GetGrant()
			if t := h.GetAcquireTime(); t != nil {
				a.acquired = t.AsTime()
			}
			if a.token == 0 {
				a.token = h.GetToken()
			}
		}
		return a
	}
	st, ok := rpctypes.Status(err)
	if !ok {
		if errors.Is(err, context.DeadlineExceeded) {
			return answer{kind: transient, err: err}
		}
		return answer{kind: unexpected, reason: fencestate.ReasonUnexpectedError, err: err}
	}
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted:
		return answer{kind: transient, err: err}
	case codes.Unimplemented:
		return answer{kind: unsupported, reason: fencestate.ReasonUnimplemented, err: err}
	case codes.FailedPrecondition, codes.PermissionDenied:
		if info := rpctypes.ErrorInfo(err); info != nil {
			return refusal(info, err)
		}
	}
	return answer{kind: unexpected, reason: fencestate.ReasonUnexpectedError, err: err}
}

// refusal decodes an ErrorInfo refusal. A reason this agent does not act
// on keeps its name in data.fence, with the authority's message.
func refusal(info *errdetails.ErrorInfo, err error) answer {
	md := info.GetMetadata()
	a := answer{
		reason: info.GetReason(),
		err:    err,
		holder: fencestate.Cluster{
			Name:  md[rpctypes.MetadataHolderCluster],
			UID:   md[rpctypes.MetadataHolderUID],
			Epoch: rpctypes.Uint(md, rpctypes.MetadataHolderEpoch),
		},
		highestEpoch:        rpctypes.Uint(md, rpctypes.MetadataHighestEpoch),
		maxEpochStep:        rpctypes.Uint(md, rpctypes.MetadataMaxEpochStep),
		generation:          rpctypes.Uint(md, rpctypes.MetadataClusterGeneration),
		presentedGeneration: rpctypes.Uint(md, rpctypes.MetadataPresentedGeneration),
		retryAfter:          time.Duration(rpctypes.Uint(md, rpctypes.MetadataRetryAfterMs)) * time.Millisecond,
		fenceReason:         md[rpctypes.MetadataFenceReason],
		identity:            md[rpctypes.MetadataIdentity],
	}
	kind, ok := refusalKinds[info.GetReason()]
	if !ok {
		kind = refusedOther
	}
	a.kind = kind
	return a
}
