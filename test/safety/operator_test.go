package safety

import (
	"context"
	"fmt"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// operatorTimeout bounds each call of an operate step.
const operatorTimeout = time.Second

// client is a client of the authority with identity, made once per run.
func (r *run) client(identity string) fencev1.FenceServiceClient {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clients == nil {
		r.clients = map[string]fencev1.FenceServiceClient{}
	}
	c, ok := r.clients[identity]
	if !ok {
		c = r.srv.ClientTLS(r.t, r.srv.clientTLS(r.t, identity))
		r.clients[identity] = c
	}
	return c
}

// operate plays an operator's action, or a hostile caller's. The operator's
// may take the fence from a cluster (never faster than its leases end); the
// hostile ones must be refused, whatever the fence's state.
func (r *run) operate(st step) {
	name := clusterNames[st.cluster]
	r.mu.Lock()
	p := r.serving[st.cluster][st.replica]
	instance, epoch, fence := p.instance(), p.epochs[st.domain], r.domains[st.domain]
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), operatorTimeout)
	defer cancel()
	operator := r.client(operatorID)
	switch st.action {
	case revokeCluster:
		_, err := operator.RevokeFence(ctx, &fencev1.RevokeFenceRequest{Domain: fence, ClusterName: name})
		r.event("the operator revokes every lease of %s: %s", name, outcome(err))
	case revokePod:
		_, err := operator.RevokeFence(ctx, &fencev1.RevokeFenceRequest{Domain: fence, ClusterName: name, Instance: &instance})
		r.event("the operator revokes the lease of %s: %s", p.name, outcome(err))
	case forget:
		r.mu.Lock()
		copied := r.copies[st.cluster] > 0
		r.mu.Unlock()
		if copied {
			// Forgetting a cluster is the operator's word that its
			// record is gone: any copy of it may then declare anew,
			// which is what forget is for.
			r.event("the operator does not forget %s: a copy of it restored from a backup may run", name)
			return
		}
		_, err := operator.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{Domain: fence, ClusterName: name, ClusterUid: p.uid})
		r.event("the operator forgets %s: %s", name, outcome(err))
	case foreignRelease:
		req := &fencev1.ReleaseFenceRequest{Domain: fence, ClusterName: name, ClusterUid: p.uid, Epoch: epoch, Instance: instance}
		for _, as := range []string{operatorID, clusterID(clusterNames[(st.cluster+1)%len(clusterNames)]), intruderID} {
			_, err := r.client(as).ReleaseFence(ctx, req)
			r.refused(err, codes.PermissionDenied, "%s releases the lease of %s", as, p.name)
		}
	case foreignDeclare:
		req := &fencev1.DeclareClusterEpochRequest{Domain: fence, ClusterName: name, ClusterUid: p.uid, Epoch: epoch + 100, Instance: "impostor"}
		for _, as := range []string{clusterID(clusterNames[(st.cluster+1)%len(clusterNames)]), intruderID, operatorID} {
			_, err := r.client(as).DeclareClusterEpoch(ctx, req)
			r.refused(err, codes.PermissionDenied, "%s declares as %s", as, name)
		}
	case outOfStep:
		req := &fencev1.DeclareClusterEpochRequest{Domain: fence, ClusterName: rogueName, ClusterUid: "uid-rogue", Epoch: 18446744073709551615}
		_, err := r.client(rogueID).DeclareClusterEpoch(ctx, req)
		r.refused(err, codes.FailedPrecondition, "the rogue cluster declares epoch %d", req.GetEpoch())
	}
}

// refused records a call that must have been refused with code; any other
// answer fails the test (an unavailable authority, restarting, excepted).
func (r *run) refused(err error, code codes.Code, format string, args ...any) {
	what := fmt.Sprintf(format, args...)
	st := status.Convert(err)
	switch st.Code() {
	case code:
		r.event("%s: refused (%s)", what, rpctypes.ErrorInfo(err).GetReason())
	case codes.Unavailable, codes.DeadlineExceeded:
		r.event("%s: %s", what, st.Code())
	default:
		r.t.Errorf("%s: %v, want %s: a caller acted as someone else, or past the epoch guard", what, err, code)
	}
}

// outcome describes an operator call's answer for the history.
func outcome(err error) string {
	if err == nil {
		return "done"
	}
	st := status.Convert(err)
	if reason := rpctypes.ErrorInfo(err).GetReason(); reason != "" {
		return reason
	}
	return strings.ToLower(st.Code().String())
}
