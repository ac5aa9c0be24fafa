package authority

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/authority/internal/store"
	"github.com/fencegate/fencegate/authority/statemachine"
)

// refusal is a FailedPrecondition error with the fence domain's ErrorInfo:
// the request was valid, but the fence's state does not allow it.
func refusal(reason, message string, metadata map[string]string) error {
	return rpctypes.Refusal(codes.FailedPrecondition, reason, message, metadata)
}

// metadata names the domain, the holder and the declared epoch.
func metadata(domain string, s statemachine.State, declared uint64) map[string]string {
	md := map[string]string{rpctypes.MetadataDomain: domain}
	if h := s.Holder; h != nil {
		md[rpctypes.MetadataHolderCluster] = h.Name
		md[rpctypes.MetadataHolderUID] = h.UID
		md[rpctypes.MetadataHolderEpoch] = strconv.FormatUint(h.Epoch, 10)
	}
	if p := s.Pending; p != nil {
		md[rpctypes.MetadataPendingCluster] = p.Name
		md[rpctypes.MetadataPendingUID] = p.UID
		md[rpctypes.MetadataPendingEpoch] = strconv.FormatUint(p.Epoch, 10)
	}
	if declared > 0 {
		md[rpctypes.MetadataDeclaredEpoch] = strconv.FormatUint(declared, 10)
	}
	return md
}

// declareRefusal turns a refused declaration into its error, with a message
// that tells an operator what is going on and what to do.
func declareRefusal(domain string, d statemachine.Declaration, r statemachine.Result) error {
	a, h, p := r.Answer, r.State.Holder, r.State.Pending
	md := metadata(domain, r.State, d.Epoch)
	self := fmt.Sprintf("cluster %q (epoch %d)", d.Cluster.Name, d.Epoch)
	if a.Outcome == statemachine.Regressed {
		md[rpctypes.MetadataHighestEpoch] = strconv.FormatUint(a.HighestEpoch, 10)
		return refusal(rpctypes.ReasonEpochRegressed, fmt.Sprintf(
			"cluster %q (uid %s) declared epoch %d, below epoch %d that it declared before%s; "+
				"a cluster restored from a backup or a lowered epoch setting does this: set %s's epoch to at least %d",
			d.Cluster.Name, d.Cluster.UID, d.Epoch, a.HighestEpoch, inDomain(domain), d.Cluster.Name, a.HighestEpoch), md)
	}
	if a.ClusterGeneration != 0 {
		// A fenced or acquiring cluster is a current copy of itself
		// too: it learns its generation from its refusals.
		md[rpctypes.MetadataClusterGeneration] = strconv.FormatUint(a.ClusterGeneration, 10)
	}
	if a.Outcome == statemachine.Acquiring {
		md[rpctypes.MetadataRetryAfterMs] = strconv.FormatInt(ceilMillis(a.RetryAfter), 10)
		return refusal(rpctypes.ReasonAcquiring, fmt.Sprintf(
			"%s is taking the fence%s over from cluster %q (epoch %d): the last lease of %s's instances ends in %s unless each of them releases the fence sooner; retry then",
			self, inDomain(domain), h.Name, h.Epoch, h.Name, a.RetryAfter.Round(time.Millisecond)), md)
	}
	var msg string
	md[rpctypes.MetadataFenceReason] = fenceReasons[a.FenceReason]
	switch a.FenceReason {
	case statemachine.LeaseRevoked:
		by := h.RevokedBy
		if l, ok := h.Instances[d.Instance]; ok && l.Revoked {
			by = l.RevokedBy
		}
		md[rpctypes.MetadataRevokedBy] = by
		msg = fmt.Sprintf("%s is fenced: its lease of the fence%s (instance %q) was revoked by %s; it is not renewed, and %s must stop changing its Components. "+
			"Raise %s's epoch above %d to take the fence back, or fail over to another cluster",
			self, inDomain(domain), d.Instance, identityName(by), d.Cluster.Name, d.Cluster.Name, max(h.RevokedEpoch, h.Epoch))
	case statemachine.TakeoverPending:
		msg = fmt.Sprintf("%s is fenced: cluster %q is taking the fence%s over at epoch %d; %s must stop changing its Components and release the fence",
			self, p.Name, inDomain(domain), p.Epoch, d.Cluster.Name)
	case statemachine.OtherTakeoverPending:
		msg = fmt.Sprintf("%s is fenced: cluster %q is already taking the fence%s over from cluster %q at epoch %d; raise %s's epoch above %d to take over instead",
			self, p.Name, inDomain(domain), h.Name, p.Epoch, d.Cluster.Name, p.Epoch)
	default:
		verb := "holds"
		if h.Released {
			verb = "released"
		}
		msg = fmt.Sprintf("%s is fenced: cluster %q %s the fence%s at epoch %d; raise %s's epoch above %d to take over",
			self, h.Name, verb, inDomain(domain), h.Epoch, d.Cluster.Name, h.Epoch)
		if h.UID == d.Cluster.UID {
			msg += fmt.Sprintf(" (both clusters have uid %s: two clusters share a UID, or the cluster was renamed)", h.UID)
		}
	}
	return refusal(rpctypes.ReasonClusterFenced, msg, md)
}

// fenceReasons are the metadata values of the reasons a declaration is
// fenced.
var fenceReasons = map[statemachine.FenceReason]string{
	statemachine.HeldByOther:          rpctypes.FenceReasonHeldByOther,
	statemachine.TakeoverPending:      rpctypes.FenceReasonTakeoverPending,
	statemachine.OtherTakeoverPending: rpctypes.FenceReasonOtherTakeoverPending,
	statemachine.LeaseRevoked:         rpctypes.FenceReasonRevoked,
}

// epochStepRefusal refuses a declaration too far above the domain's highest
// epoch.
func epochStepRefusal(domain string, d statemachine.Declaration, e *statemachine.EpochStepError) error {
	md := map[string]string{
		rpctypes.MetadataDomain:        domain,
		rpctypes.MetadataDeclaredEpoch: strconv.FormatUint(e.Declared, 10),
		rpctypes.MetadataHighestEpoch:  strconv.FormatUint(e.Highest, 10),
		rpctypes.MetadataMaxEpochStep:  strconv.FormatUint(e.MaxStep, 10),
	}
	return refusal(rpctypes.ReasonEpochStepTooLarge, fmt.Sprintf(
		"cluster %q declared epoch %d, more than %d above %d, the highest epoch declared%s; nothing was recorded. "+
			"Declare at most %d (one above the holder's epoch is enough to take over)",
		d.Cluster.Name, e.Declared, e.MaxStep, e.Highest, inDomainOrDefault(domain), e.Highest+min(e.MaxStep, math.MaxUint64-e.Highest)), md)
}

// bindingRefusal refuses a declaration of a cluster UID under another name
// than the one it is bound to: the caller acts as a cluster it is not, or
// a cluster UID was copied between clusters' settings, or the cluster was
// renamed, for which the message gives the whole command that forgets the
// name the UID is bound to. A UID bound in other domains than the declared
// one (e.Domains) is bound in every domain: the message names those
// domains, and a forget command for each of them.
func bindingRefusal(ctx context.Context, domain string, e *statemachine.BindingError) error {
	forget := func(domain string) string {
		cmd := "fencegate fence forget"
		if domain != rpctypes.DefaultDomain {
			cmd += " --domain " + domain
		}
		return cmd + fmt.Sprintf(" --cluster %s --cluster-uid %s", e.Bound, shellWord(e.UID))
	}
	msg := fmt.Sprintf("cluster uid %q is bound to cluster %q%s, not %q: a cluster cannot declare another cluster's UID; "+
		"to rename a cluster, forget it first (%s)",
		e.UID, e.Bound, inDomain(domain), e.Declared, forget(domain))
	if len(e.Domains) > 0 {
		quoted, cmds := make([]string, len(e.Domains)), make([]string, len(e.Domains))
		for i, d := range e.Domains {
			quoted[i], cmds[i] = strconv.Quote(d), forget(d)
		}
		msg = fmt.Sprintf("cluster uid %q is bound to cluster %q in domain %s, not %q: a cluster cannot declare another cluster's UID, "+
			"in any domain; to rename a cluster, forget it first in each domain that records it (%s)",
			e.UID, e.Bound, strings.Join(quoted, ", "), e.Declared, strings.Join(cmds, "; "))
	}
	return rpctypes.Refusal(codes.PermissionDenied, rpctypes.ReasonPermissionDenied, msg, map[string]string{
		rpctypes.MetadataDomain:       domain,
		rpctypes.MetadataCluster:      e.Declared,
		rpctypes.MetadataBoundCluster: e.Bound,
		rpctypes.MetadataIdentity:     actor(ctx).Identity,
	})
}

// shellWord quotes s for a shell command line in a message, unless it
// is safe as it is. Cluster names and domains are DNS labels; a cluster
// UID is printable and without spaces, but may be anything else.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/@%+=,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// restoredRefusal refuses a declaration that presents a stale generation
// of its cluster. The metadata carries the generation presented, never the
// current one: a copy restored from a backup must not learn it from its
// refusal.
func restoredRefusal(domain string, d statemachine.Declaration, e *statemachine.RestoredError) error {
	return refusal(rpctypes.ReasonClusterRestored, fmt.Sprintf(
		"cluster %q (uid %s) looks restored from a backup%s: this instance (%q) presents generation %d of the cluster, which the authority moved past; "+
			"it is told it holds nothing and admits nothing. If this copy should take over, fail over to it (%s raises its epoch above %d); "+
			"otherwise remove it. A process cut off from the authority for longer than two generation periods is told the same, and recovers once its peers' Fence shows the current generation",
		d.Cluster.Name, d.Cluster.UID, inDomain(domain), d.Instance, e.Presented, rpctypes.FailoverCommand(domain, d.Cluster.Name), e.HighestEpoch), map[string]string{
		rpctypes.MetadataDomain:              domain,
		rpctypes.MetadataDeclaredEpoch:       strconv.FormatUint(d.Epoch, 10),
		rpctypes.MetadataHighestEpoch:        strconv.FormatUint(e.HighestEpoch, 10),
		rpctypes.MetadataPresentedGeneration: strconv.FormatUint(e.Presented, 10),
	})
}

// revokeRefusal refuses to revoke leases of a cluster that holds none.
func revokeRefusal(domain string, r statemachine.Revocation, s statemachine.State) error {
	md := metadata(domain, s, 0)
	md[rpctypes.MetadataCluster] = r.ClusterName
	if h := s.Holder; h != nil {
		return rpctypes.Refusal(codes.FailedPrecondition, rpctypes.ReasonNotHolder, fmt.Sprintf(
			"cluster %q does not hold the fence%s, so it has no lease to revoke: cluster %q holds it at epoch %d",
			r.ClusterName, inDomain(domain), h.Name, h.Epoch), md)
	}
	return rpctypes.Refusal(codes.FailedPrecondition, rpctypes.ReasonNotHolder, fmt.Sprintf(
		"cluster %q does not hold the fence%s, so it has no lease to revoke: no cluster holds it", r.ClusterName, inDomain(domain)), md)
}

// forgetRefusal refuses to forget a cluster that is in use or unknown.
func forgetRefusal(domain string, f statemachine.Forgetting, r statemachine.ForgetResult) error {
	md := metadata(domain, r.State, 0)
	md[rpctypes.MetadataCluster] = f.Cluster.Name
	if r.Outcome == statemachine.ForgetInUse {
		role := "holds the fence"
		if p := r.State.Pending; p != nil && p.UID == f.Cluster.UID {
			role = "is taking the fence over"
		}
		return rpctypes.Refusal(codes.FailedPrecondition, rpctypes.ReasonClusterInUse, fmt.Sprintf(
			"cluster %q (uid %s) %s%s: its epoch is what keeps the fence where it is, so it cannot be forgotten; fail over to another cluster first",
			f.Cluster.Name, f.Cluster.UID, role, inDomain(domain)), md)
	}
	if r.Record.Name != "" {
		return status.Errorf(codes.NotFound, "cluster uid %s is recorded%s as cluster %q, not %q: name both as the authority recorded them (fencegate fence status)",
			f.Cluster.UID, inDomain(domain), r.Record.Name, f.Cluster.Name)
	}
	return status.Errorf(codes.NotFound, "no cluster with uid %s declared%s: nothing to forget (fencegate fence status lists the clusters seen)", f.Cluster.UID, inDomain(domain))
}

// identityName shows an identity in messages; the empty one is a caller
// without a client certificate.
func identityName(identity string) string {
	if identity == "" {
		return "a caller without a client identity"
	}
	return strconv.Quote(identity)
}

// inDomainOrDefault names the domain in messages, the default one too.
func inDomainOrDefault(domain string) string { return fmt.Sprintf(" in domain %q", domain) }

// releaseRefusal turns a refused release into its error.
func releaseRefusal(domain string, r statemachine.Release, res statemachine.ReleaseResult) error {
	h := res.State.Holder
	md := metadata(domain, res.State, r.Epoch)
	if res.Outcome == statemachine.ReleaseRegressed {
		return refusal(rpctypes.ReasonEpochRegressed, fmt.Sprintf(
			"instance %q of cluster %q (uid %s) cannot release its lease of the fence%s with epoch %d: it declared epoch %d",
			r.Instance, h.Name, r.ClusterUID, inDomain(domain), r.Epoch, h.Instances[r.Instance].Epoch), md)
	}
	who := "cluster uid " + r.ClusterUID
	if r.ClusterName != "" {
		who = fmt.Sprintf("cluster %q (uid %s)", r.ClusterName, r.ClusterUID)
	}
	if h == nil {
		return refusal(rpctypes.ReasonClusterFenced, fmt.Sprintf(
			"%s cannot release the fence%s: no cluster holds it", who, inDomain(domain)), md)
	}
	return refusal(rpctypes.ReasonClusterFenced, fmt.Sprintf(
		"%s cannot release the fence%s: cluster %q (uid %s) holds it at epoch %d",
		who, inDomain(domain), h.Name, h.UID, h.Epoch), md)
}

// inDomain names a domain other than the default one in messages.
func inDomain(domain string) string {
	if domain == rpctypes.DefaultDomain {
		return ""
	}
	return fmt.Sprintf(" of domain %q", domain)
}

// ceilMillis rounds up, so a client that waits retry_after_ms finds the
// lease over.
func ceilMillis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// storeError turns a failure of the store into a gRPC status: bad arguments
// name their field; a request past a bound of the record and etcd being
// unreachable are ResourceExhausted and Unavailable, so clients retry.
func storeError(err error) error {
	var fieldErr *rpctypes.FieldError
	var limitErr *statemachine.LimitError
	switch {
	case errors.As(err, &fieldErr):
		st, detailErr := status.New(codes.InvalidArgument, fieldErr.Error()).WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: fieldErr.Field, Description: fieldErr.Problem}},
		})
		if detailErr != nil {
			return status.Error(codes.InvalidArgument, fieldErr.Error())
		}
		return st.Err()
	case errors.As(err, &limitErr):
		return status.Error(codes.ResourceExhausted, limitErr.Problem)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.Is(err, store.ErrContention):
		return status.Error(codes.Aborted, err.Error())
	case store.IsUnavailable(err):
		return status.Errorf(codes.Unavailable, "fence store unavailable: %v", err)
	default:
		return status.Errorf(codes.Internal, "fence store: %v", err)
	}
}

// resultOK is the metrics label of a call that succeeded.
const resultOK = "ok"

// resultLabel is the metrics label of a failed call, from the status it
// answers with: a refusal is labelled by its reason, the way the agent
// labels the same answer (rpctypes.ResultLabel).
func resultLabel(st error) string {
	if info := rpctypes.ErrorInfo(st); info != nil {
		return rpctypes.ResultLabel(info.GetReason())
	}
	switch status.Code(st) {
	case codes.InvalidArgument:
		return "invalid"
	case codes.ResourceExhausted:
		return "limited"
	}
	return "error"
}
