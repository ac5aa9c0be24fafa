package authz

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/internal/promreg"
)

// deniedLogInterval is how often a refusal of one identity and method is
// logged at most: a misconfigured or hostile client refused on every
// heartbeat must not flood the log, but must show in it.
const deniedLogInterval = time.Minute

// maxLogKeys bounds the identities and methods the log limiter remembers,
// and so the refusals it logs a minute.
const maxLogKeys = 1024

// Guard authorizes every call before its handler runs and puts the Caller
// into the call's context. Without a policy (authorization is off) it allows
// every call and still records who made it. Whether or not there is a
// policy, a call whose client certificate has expired is refused with
// Unauthenticated: a connection outlives the handshake that checked it.
//
// An open stream stays authorized only as long as it would be opened
// again: each reload of the authorization file (Policy.Replaced) decides it
// again, and one the new file refuses ends with the PermissionDenied a
// refused open gets, counted the same way; at its client certificate's
// expiry it ends with Unauthenticated.
//
// A handler that refuses an allowed call with PermissionDenied by the
// fence's own rules reports it to Refused, so that it is counted and
// logged as the Guard's refusals are.
type Guard struct {
	policy  func() *Policy
	log     logr.Logger
	clock   clock.WithDelayedExecution
	denials *prometheus.CounterVec

	mu     sync.Mutex
	logged map[logKey]time.Time
}

type logKey struct{ identity, method string }

// GuardOptions configure a Guard.
type GuardOptions struct {
	// Policy returns the policy in force (Source.Policy); nil turns
	// authorization off.
	Policy func() *Policy
	// Logger receives the refusals, its own and those reported to
	// Refused, at most one a minute per identity and method.
	Logger logr.Logger
	// Registerer receives the refusal counter; nil registers nowhere.
	Registerer prometheus.Registerer
	// Clock judges certificate expiry and spaces the refusal log; nil
	// means the real clock.
	Clock clock.WithDelayedExecution
}

// NewGuard returns a Guard.
func NewGuard(opts GuardOptions) (*Guard, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	g := &Guard{
		policy: opts.Policy,
		log:    opts.Logger,
		clock:  opts.Clock,
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_permission_denied_total",
			Help: "Calls refused because the caller's identity may not make them or declares a cluster UID bound to another cluster's name, and streams ended because a reloaded authorization file no longer allows them, by method.",
		}, []string{"method"}),
		logged: map[logKey]time.Time{},
	}
	if err := promreg.Register(opts.Registerer, "authorization guard", g.denials); err != nil {
		return nil, err
	}
	return g, nil
}

// ServerOptions are the interceptors to install on the gRPC server.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

func (g *Guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, _, err := g.check(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	base, end := context.WithCancelCause(ss.Context())
	defer end(nil)
	err := handler(srv, &guardedStream{ServerStream: ss, guard: g, method: info.FullMethod, base: base, end: end})
	// The handler saw its context end; the client is told why.
	var ended *streamEnd
	if errors.As(context.Cause(base), &ended) {
		return ended.status
	}
	return err
}

// streamEnd is why the Guard ended a stream: the status its client gets.
type streamEnd struct{ status error }

func (e *streamEnd) Error() string { return e.status.Error() }

// guardedStream checks each message the client sends, which for the fence
// protocol's one stream (WatchFence) is its only request, before the
// handler sees it.
type guardedStream struct {
	grpc.ServerStream
	guard  *Guard
	method string
	// base is the stream's context; end ends it with a streamEnd.
	base context.Context
	end  context.CancelCauseFunc
	// ctx is base with the Caller, once a message was allowed.
	ctx context.Context
}

func (s *guardedStream) Context() context.Context {
	if s.ctx != nil {
		return s.ctx
	}
	return s.base
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ctx, a, err := s.guard.check(s.base, s.method, m)
	if err != nil {
		return err
	}
	if s.ctx == nil && (a.policy != nil || !a.caller.Expires.IsZero()) {
		go s.guard.watch(s.base, s.end, a)
	}
	s.ctx = ctx
	return nil
}

// grant is an allowed call: who made it, what it asked, and the policy
// that allowed it (nil without one).
type grant struct {
	caller Caller
	method string
	req    Request
	policy *Policy
}

// check authorizes one request and returns the context its handler runs
// with and what it allowed, or the refusal.
func (g *Guard) check(ctx context.Context, method string, req any) (context.Context, grant, error) {
	p, _ := peer.FromContext(ctx)
	a := grant{caller: CallerOf(p), method: method, req: RequestOf(method, req)}
	if !a.caller.Expires.IsZero() && !isHealth(method) && !g.clock.Now().Before(a.caller.Expires) {
		return ctx, a, g.expired(a)
	}
	if g.policy != nil {
		a.policy = g.policy()
		if err := g.authorize(&a, ""); err != nil {
			return ctx, a, err
		}
	}
	return WithCaller(ctx, a.caller), a, nil
}

// watch ends an open stream, until ctx ends: with the refusal a reload of
// the authorization file gives it, or with Unauthenticated when its client
// certificate expires. A handler that waits on the stream's context
// (WatchFence) returns at once; one that waits for the client's next
// message is refused at that message.
func (g *Guard) watch(ctx context.Context, end context.CancelCauseFunc, a grant) {
	var expiry <-chan time.Time
	if !a.caller.Expires.IsZero() {
		t := g.clock.NewTimer(a.caller.Expires.Sub(g.clock.Now()))
		defer t.Stop()
		expiry = t.C()
	}
	var replaced <-chan struct{} // nil, never ready, without a policy
	if a.policy != nil {
		replaced = a.policy.Replaced()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-expiry:
			end(&streamEnd{g.expired(a)})
			return
		case <-replaced:
			a.policy = g.policy()
			if err := g.authorize(&a, "a reload of the authorization file"); err != nil {
				end(&streamEnd{err})
				return
			}
			replaced = a.policy.Replaced()
		}
	}
}

// authorize decides a by its policy and puts the identity it is made as
// into a.caller. A refusal is counted, logged and returned as
// PermissionDenied; after names what it follows, for an open stream, and
// is empty for a new call.
func (g *Guard) authorize(a *grant, after string) error {
	identity, decision := a.policy.Decide(a.caller.Claims, a.req)
	a.caller.Identity = identity
	if decision.Allowed {
		return nil
	}
	reason := decision.Reason
	if after != "" {
		reason = fmt.Sprintf("the stream is refused after %s: %s", after, reason)
	}
	g.refused(a.caller, a.method, reason, "cluster", a.req.Cluster, "domain", a.req.Domain)
	return rpctypes.Refusal(codes.PermissionDenied, rpctypes.ReasonPermissionDenied, reason, map[string]string{
		rpctypes.MetadataIdentity: identity,
		rpctypes.MetadataMethod:   a.method,
		rpctypes.MetadataCluster:  a.req.Cluster,
		rpctypes.MetadataDomain:   a.req.Domain,
	})
}

// Refused counts and logs a call that its handler refuses with
// PermissionDenied after the Guard let it through: the policy allows the
// caller to act as the cluster it names, but the fence's own rules do not
// (a cluster UID declared under another name than the one it is bound to).
// Such a refusal is counted and logged as the Guard's own are, with or
// without a policy: in fencegate_authority_permission_denied_total{method},
// and at error level at most once a minute per identity and method. method
// is the call's full gRPC method; the identity and peer are the Caller the
// Guard put into ctx; reason is what the client is told, and keysAndValues
// name what the call asked for.
func (g *Guard) Refused(ctx context.Context, method, reason string, keysAndValues ...any) {
	g.refused(CallerFrom(ctx), method, reason, keysAndValues...)
}

// refused counts a PermissionDenied refusal of caller's call of method and
// logs it if the limiter lets it.
func (g *Guard) refused(caller Caller, method, reason string, keysAndValues ...any) {
	short := shortMethod(method)
	g.denials.WithLabelValues(short).Inc()
	if g.shouldLog(caller.Identity, short) {
		kv := append([]any{"identity", caller.Identity, "peer", caller.Peer, "method", short}, keysAndValues...)
		g.log.Error(nil, "call refused", append(kv, "reason", reason)...)
	}
}

// expired is the refusal of a call whose client certificate has expired,
// logged like a permission refusal.
func (g *Guard) expired(a grant) error {
	at := a.caller.Expires.UTC().Format(time.RFC3339)
	short := shortMethod(a.method)
	if g.shouldLog(a.caller.Identity, short) {
		g.log.Info("call refused: client certificate expired", "identity", a.caller.Identity, "peer", a.caller.Peer,
			"method", short, "expiredAt", at)
	}
	return status.Errorf(codes.Unauthenticated, "the client certificate expired at %s: connect again with a valid one", at)
}

// shouldLog reports whether a refusal of identity calling method is due
// for the log, and notes it.
func (g *Guard) shouldLog(identity, method string) bool {
	now := g.clock.Now()
	k := logKey{identity, method}
	g.mu.Lock()
	defer g.mu.Unlock()
	if last, ok := g.logged[k]; ok && now.Sub(last) < deniedLogInterval {
		return false
	}
	if len(g.logged) >= maxLogKeys {
		for old, at := range g.logged {
			if now.Sub(at) >= deniedLogInterval {
				delete(g.logged, old)
			}
		}
		if len(g.logged) >= maxLogKeys {
			// Every refusal remembered was logged within the minute: a
			// flood of identities or methods. The counter still counts
			// this one; the log takes new keys again once old ones age.
			return false
		}
	}
	g.logged[k] = now
	return true
}

// RequestOf is what the authorizer looks at in a request of method.
func RequestOf(method string, req any) Request {
	r := Request{Method: method}
	switch m := req.(type) {
	case *fencev1.DeclareClusterEpochRequest:
		r.Domain, r.Cluster = m.GetDomain(), m.GetClusterName()
	case *fencev1.ReleaseFenceRequest:
		r.Domain, r.Cluster = m.GetDomain(), m.GetClusterName()
	case *fencev1.RevokeFenceRequest:
		r.Domain, r.Cluster = m.GetDomain(), m.GetClusterName()
	case *fencev1.ForgetClusterRequest:
		r.Domain, r.Cluster = m.GetDomain(), m.GetClusterName()
	case *fencev1.GetFenceRequest:
		r.Domain = m.GetDomain()
	case *fencev1.WatchFenceRequest:
		r.Domain = m.GetDomain()
	case *fencev1.GetFenceHistoryRequest:
		r.Domain = m.GetDomain()
	default:
		return r
	}
	r.Domain = rpctypes.NormalizeDomain(r.Domain)
	return r
}
