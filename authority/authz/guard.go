package authz

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
)

// deniedLogInterval is how often a refusal of one identity and method is
// logged at most: a misconfigured or hostile client refused on every
// heartbeat must not flood the log, but must show in it.
const deniedLogInterval = time.Minute

// maxLogKeys bounds the identities and methods the log limiter remembers.
const maxLogKeys = 1024

// Guard authorizes every call before its handler runs and puts the Caller
// into the call's context. Without a policy (authorization is off) it allows
// every call and still records who made it.
type Guard struct {
	policy  func() *Policy
	log     logr.Logger
	clock   clock.PassiveClock
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
	// Logger receives the refusals, at most one a minute per identity and
	// method.
	Logger logr.Logger
	// Registerer receives the refusal counter; nil registers nowhere.
	Registerer prometheus.Registerer
	// Clock spaces the refusal log; nil means the real clock.
	Clock clock.PassiveClock
}

// NewGuard returns a Guard.
func NewGuard(opts GuardOptions) (*Guard, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	g := &Guard{
		policy: opts.Policy,
		log:    opts.Logger,
		clock:  opts.Clock,
		denials: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_permission_denied_total",
			Help: "Calls refused because the caller's identity may not make them, by method.",
		}, []string{"method"}),
		logged: map[logKey]time.Time{},
	}
	if err := opts.Registerer.Register(g.denials); err != nil {
		return nil, fmt.Errorf("register authorization metrics: %w", err)
	}
	return g, nil
}

// ServerOptions are the interceptors to install on the gRPC server.
func (g *Guard) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.ChainUnaryInterceptor(g.unary), grpc.ChainStreamInterceptor(g.stream)}
}

func (g *Guard) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	ctx, err := g.check(ctx, info.FullMethod, req)
	if err != nil {
		return nil, err
	}
	return handler(ctx, req)
}

func (g *Guard) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, &guardedStream{ServerStream: ss, guard: g, method: info.FullMethod})
}

// guardedStream checks each message the client sends, which for the fence
// protocol's one stream (WatchFence) is its only request, before the
// handler sees it.
type guardedStream struct {
	grpc.ServerStream
	guard  *Guard
	method string
	ctx    context.Context
}

func (s *guardedStream) Context() context.Context {
	if s.ctx != nil {
		return s.ctx
	}
	return s.ServerStream.Context()
}

func (s *guardedStream) RecvMsg(m any) error {
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	ctx, err := s.guard.check(s.ServerStream.Context(), s.method, m)
	if err != nil {
		return err
	}
	s.ctx = ctx
	return nil
}

// check authorizes one request and returns the context its handler runs
// with, or the refusal.
func (g *Guard) check(ctx context.Context, method string, req any) (context.Context, error) {
	p, _ := peer.FromContext(ctx)
	caller := CallerOf(p)
	ctx = WithCaller(ctx, caller)
	if g.policy == nil {
		return ctx, nil
	}
	r := RequestOf(method, req)
	decision := g.policy().Authorize(caller.Identity, r)
	if decision.Allowed {
		return ctx, nil
	}
	short := shortMethod(method)
	g.denials.WithLabelValues(short).Inc()
	if g.shouldLog(caller.Identity, short) {
		g.log.Error(nil, "call refused", "identity", caller.Identity, "peer", caller.Peer,
			"method", short, "cluster", r.Cluster, "domain", r.Domain, "reason", decision.Reason)
	}
	return ctx, rpctypes.Refusal(codes.PermissionDenied, rpctypes.ReasonPermissionDenied, decision.Reason, map[string]string{
		rpctypes.MetadataIdentity: caller.Identity,
		rpctypes.MetadataMethod:   method,
		rpctypes.MetadataCluster:  r.Cluster,
		rpctypes.MetadataDomain:   r.Domain,
	})
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
