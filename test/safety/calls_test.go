package safety

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// callLog records the declarations and releases of a history's agents as
// their clients saw them, for the linearizability check, and when each
// token was first seen granted, for the actions' check.
type callLog struct {
	mu    sync.Mutex
	calls []FenceCall
	// granted is, by token, the earliest end of a call answered with it:
	// by then the grant was certainly committed.
	granted map[uint64]time.Duration
}

func (l *callLog) add(c FenceCall) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, c)
}

func (l *callLog) seen(token uint64, end time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.granted == nil {
		l.granted = map[uint64]time.Duration{}
	}
	if at, ok := l.granted[token]; !ok || end < at {
		l.granted[token] = end
	}
}

// recordingClient records an agent's declarations and releases in the
// run's callLog.
type recordingClient struct {
	fencev1.FenceServiceClient
	r *run
}

// uncertain says whether a failed call may have taken effect: it reached
// no answer, not a refusal.
func uncertain(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

func (c *recordingClient) DeclareClusterEpoch(ctx context.Context, req *fencev1.DeclareClusterEpochRequest, opts ...grpc.CallOption) (*fencev1.DeclareClusterEpochResponse, error) {
	start := c.r.since()
	resp, err := c.FenceServiceClient.DeclareClusterEpoch(ctx, req, opts...)
	call := FenceCall{Kind: CallDeclare, Domain: req.GetDomain(), UID: req.GetClusterUid(), Epoch: req.GetEpoch(), Start: start, End: c.r.since()}
	switch {
	case err == nil:
		c.r.calls.seen(resp.GetToken(), call.End)
		if id := resp.GetLeaseDeclarationId(); id != 0 && id != req.GetDeclarationId() {
			// A kept lease: an answer a replica may make from its
			// cached record, no linearizable read.
			return resp, err
		}
		call.Answer, call.Token = AnswerLease, resp.GetToken()
	case uncertain(err):
		call.Answer = AnswerUnknown
	default:
		return resp, err
	}
	c.r.calls.add(call)
	return resp, err
}

func (c *recordingClient) ReleaseFence(ctx context.Context, req *fencev1.ReleaseFenceRequest, opts ...grpc.CallOption) (*fencev1.ReleaseFenceResponse, error) {
	start := c.r.since()
	resp, err := c.FenceServiceClient.ReleaseFence(ctx, req, opts...)
	call := FenceCall{Kind: CallRelease, Domain: req.GetDomain(), UID: req.GetClusterUid(), Epoch: req.GetEpoch(), Start: start, End: c.r.since()}
	switch {
	case err == nil:
		call.Answer = AnswerReleased
	case rpctypes.ErrorInfo(err).GetReason() == rpctypes.ReasonClusterFenced:
		call.Answer = AnswerReleaseFenced
	default:
		// A release of unknown outcome changes no holder: nothing to
		// check.
		return resp, err
	}
	c.r.calls.add(call)
	return resp, err
}

// grants reads the grants of the run's domains from the authority's own
// history.
func (r *run) grants() []Grant {
	var out []Grant
	for _, d := range r.domains {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := r.client(operatorID).GetFenceHistory(ctx, &fencev1.GetFenceHistoryRequest{Domain: d})
		cancel()
		if err != nil {
			r.t.Errorf("the history of domain %s: %v", d, err)
			continue
		}
		for _, e := range resp.GetEvents() {
			if e.GetType() != fencev1.FenceHistoryEventType_FENCE_HISTORY_EVENT_TYPE_GRANTED {
				continue
			}
			out = append(out, Grant{Domain: d, UID: e.GetClusterUid(), Token: e.GetToken(), AfterExpiry: e.GetGrant() == "after_expiry"})
		}
	}
	return out
}
