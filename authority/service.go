package authority

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authz"
	"github.com/fencegate/fencegate/authority/internal/store"
	"github.com/fencegate/fencegate/authority/statemachine"
)

// DefaultLeaseTTL is the lease length when Options do not set one.
const DefaultLeaseTTL = 15 * time.Second

// DefaultHistoryLimit is how many history entries each domain keeps when
// Options do not set another limit.
const DefaultHistoryLimit = store.DefaultHistoryLimit

// Options configure a Service.
type Options struct {
	// LeaseTTL is how long a grant or renewal lasts; DefaultLeaseTTL if 0.
	LeaseTTL time.Duration
	// KeyPrefix starts every etcd key the authority writes; "/fencegate/"
	// if empty. Authorities that share an etcd and a prefix are replicas
	// of one authority.
	KeyPrefix string
	// Clock is the authority's wall clock: the times it records and
	// shows. Nil means the real clock.
	Clock clock.PassiveClock
	// Monotonic reads the replica's monotonic clock, by which lease ends
	// are judged (see docs/design.md, "Clocks"); nil means the time since
	// New by Clock.
	Monotonic func() time.Duration
	// ClusterGenerationPeriod is how often a declaring cluster's
	// generation moves on; 0 means statemachine.DefaultGenerationPeriod.
	ClusterGenerationPeriod time.Duration
	// MaxEpochStep is how far above the highest epoch of a domain a
	// declaration may go; 0 means statemachine.DefaultMaxEpochStep.
	MaxEpochStep uint64
	// HistoryLimit is how many history entries each domain keeps; 0 means
	// DefaultHistoryLimit.
	HistoryLimit int
	// Logger receives the decision log: grants, pending takeovers,
	// releases and operator actions (never renewals or refusals, which
	// repeat every heartbeat: the Guard the Service is served with logs
	// the PermissionDenied ones, limited, to this Logger if NewServer is
	// given none).
	Logger logr.Logger
	// Registerer receives the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// Service implements fencev1.FenceServiceServer on an etcd store.
type Service struct {
	fencev1.UnimplementedFenceServiceServer

	store   *store.Store
	log     logr.Logger
	metrics *metrics
	// guard counts and logs the PermissionDenied refusals the service
	// makes, as it does its own: the Guard NewServer serves the service
	// with, or until then one without a policy that logs to log and
	// counts nowhere.
	guard *authz.Guard

	// life ends when the service closes, which ends every watch stream.
	life  context.Context
	close context.CancelFunc
}

// New returns the FenceService over an etcd client; the caller keeps
// owning the client.
func New(client *clientv3.Client, opts Options) (*Service, error) {
	if opts.LeaseTTL == 0 {
		opts.LeaseTTL = DefaultLeaseTTL
	}
	if opts.Registerer == nil {
		opts.Registerer = prometheus.NewRegistry()
	}
	st, err := store.New(client, store.Options{
		LeaseTTL:     opts.LeaseTTL,
		MaxEpochStep: opts.MaxEpochStep,
		HistoryLimit: opts.HistoryLimit,
		Prefix:       opts.KeyPrefix,
		Clock:        opts.Clock,
		Monotonic:    opts.Monotonic,
		Registerer:   opts.Registerer,

		GenerationPeriod: opts.ClusterGenerationPeriod,
	})
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	guardOpts := authz.GuardOptions{Logger: opts.Logger}
	// A fake clock spaces the refusal log too.
	if c, ok := opts.Clock.(clock.WithDelayedExecution); ok {
		guardOpts.Clock = c
	}
	// Without a registerer it cannot fail to register.
	guard, _ := authz.NewGuard(guardOpts)
	life, closeFn := context.WithCancel(context.Background())
	return &Service{store: st, log: opts.Logger, metrics: m, guard: guard, life: life, close: closeFn}, nil
}

// Close ends every WatchFence stream (clients are told to watch again) and
// makes new ones fail; unary calls keep working. Call it before a graceful
// stop of the gRPC server, which would otherwise wait for the streams.
func (s *Service) Close() { s.close() }

// Check reports whether the store can serve: etcd answers a read that
// needs a quorum.
func (s *Service) Check(ctx context.Context) error { return s.store.Check(ctx) }

// DeclareClusterEpoch is a cluster's heartbeat: it grants, renews or refuses
// the fence by the rules of package statemachine.
func (s *Service) DeclareClusterEpoch(ctx context.Context, req *fencev1.DeclareClusterEpochRequest) (*fencev1.DeclareClusterEpochResponse, error) {
	d := statemachine.Declaration{
		Cluster:     statemachine.Identity{Name: req.GetClusterName(), UID: req.GetClusterUid()},
		Epoch:       req.GetEpoch(),
		Instance:    req.GetInstance(),
		Generation:  req.GetClusterGeneration(),
		ID:          req.GetDeclarationId(),
		KeepLeaseOf: req.GetKeepLeaseOf(),
	}
	domain, err := requestDomain(req.GetDomain())
	var result statemachine.Result
	if err == nil {
		result, err = s.store.Declare(ctx, domain, d, actor(ctx))
	}
	if err != nil {
		var st error
		var stepErr *statemachine.EpochStepError
		var bindingErr *statemachine.BindingError
		var restoredErr *statemachine.RestoredError
		switch {
		case errors.As(err, &stepErr):
			st = epochStepRefusal(domain, d, stepErr)
		case errors.As(err, &bindingErr):
			st = bindingRefusal(ctx, domain, bindingErr)
			s.guard.Refused(ctx, fencev1.FenceService_DeclareClusterEpoch_FullMethodName, status.Convert(st).Message(),
				"cluster", bindingErr.Declared, "domain", domain, "uid", bindingErr.UID, "boundCluster", bindingErr.Bound, "boundDomains", bindingErr.Domains)
		case errors.As(err, &restoredErr):
			st = restoredRefusal(domain, d, restoredErr)
		default:
			// Only what is not a refusal is a failure of the store.
			st = s.failure("declare", err)
		}
		s.metrics.declarations.WithLabelValues(resultLabel(st)).Inc()
		return nil, st
	}
	s.logDeclaration(domain, result)
	if a := result.Answer; !a.OK() {
		st := declareRefusal(domain, d, result)
		s.metrics.declarations.WithLabelValues(resultLabel(st)).Inc()
		return nil, st
	}
	s.metrics.declarations.WithLabelValues(resultOK).Inc()
	lease := result.Answer.Lease
	return &fencev1.DeclareClusterEpochResponse{
		Holder: holderProto(result.State.Holder),
		// A kept lease keeps the length it was granted for, which an
		// authority restarted with another --lease-ttl no longer has.
		LeaseTtl:           durationpb.New(lease.TTL),
		Token:              result.State.Holder.Token,
		ClusterGeneration:  result.Answer.ClusterGeneration,
		LeaseDeclarationId: lease.DeclarationID,
	}, nil
}

// ReleaseFence gives up the lease of one instance of the holder; the
// holder is released once every instance gave its lease up or the lease
// ended.
func (s *Service) ReleaseFence(ctx context.Context, req *fencev1.ReleaseFenceRequest) (*fencev1.ReleaseFenceResponse, error) {
	r := statemachine.Release{
		ClusterUID:  req.GetClusterUid(),
		ClusterName: req.GetClusterName(),
		Epoch:       req.GetEpoch(),
		Instance:    req.GetInstance(),
	}
	domain, err := requestDomain(req.GetDomain())
	var result statemachine.ReleaseResult
	var snap store.Snapshot
	if err == nil {
		result, snap, err = s.store.Release(ctx, domain, r, actor(ctx))
	}
	if err != nil {
		st := s.failure("release", err)
		s.metrics.releases.WithLabelValues(resultLabel(st)).Inc()
		return nil, st
	}
	s.metrics.releases.WithLabelValues(result.Outcome.String()).Inc()
	switch result.Outcome {
	case statemachine.Released, statemachine.AlreadyReleased, statemachine.NoLease:
		if h := result.State.Holder; result.Outcome == statemachine.Released {
			msg := "fence lease released"
			if h.Released {
				msg = "fence released"
			}
			s.log.Info(msg, "domain", domain, "cluster", h.Name, "uid", h.UID, "instance", r.Instance, "epoch", h.Epoch, "token", h.Token,
				"holderReleased", h.Released)
		}
		return &fencev1.ReleaseFenceResponse{Fence: fenceProto(snap, s.store.LeaseTTL())}, nil
	default:
		return nil, releaseRefusal(domain, r, result)
	}
}

// GetFence returns a domain's whole fence state.
func (s *Service) GetFence(ctx context.Context, req *fencev1.GetFenceRequest) (*fencev1.GetFenceResponse, error) {
	domain, err := requestDomain(req.GetDomain())
	var snap store.Snapshot
	if err == nil {
		snap, err = s.store.Get(ctx, domain)
	}
	if err != nil {
		return nil, s.failure("get", err)
	}
	return &fencev1.GetFenceResponse{Fence: fenceProto(snap, s.store.LeaseTTL())}, nil
}

// WatchFence streams the domain's fence: a snapshot, then one event per
// change of holder, release or pending takeover, made through any authority
// that shares the etcd.
func (s *Service) WatchFence(req *fencev1.WatchFenceRequest, stream fencev1.FenceService_WatchFenceServer) error {
	s.metrics.watchers.Inc()
	defer s.metrics.watchers.Dec()
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	stop := context.AfterFunc(s.life, cancel)
	defer stop()

	domain, err := requestDomain(req.GetDomain())
	if err != nil {
		return s.failure("watch", err)
	}
	var sendErr error
	err = s.store.Watch(ctx, domain, func(ev store.Event) error {
		resp := &fencev1.WatchFenceResponse{
			Type:  eventTypeProto(ev.Types),
			Fence: fenceProto(ev.Snapshot, s.store.LeaseTTL()),
		}
		if len(ev.Types) > 0 {
			resp.Actor = actorProto(ev.Snapshot.Actor)
		}
		sendErr = stream.Send(resp)
		return sendErr
	})
	switch {
	case s.life.Err() != nil:
		return status.Error(codes.Unavailable, "the fence authority is shutting down; watch again")
	case stream.Context().Err() != nil:
		return status.FromContextError(stream.Context().Err()).Err()
	case sendErr != nil:
		return sendErr
	case err == nil:
		return nil
	}
	return s.failure("watch", err)
}

// RevokeFence makes leases of the holder non-renewable; it never shortens
// them (see statemachine.Machine.Revoke).
func (s *Service) RevokeFence(ctx context.Context, req *fencev1.RevokeFenceRequest) (*fencev1.RevokeFenceResponse, error) {
	r := statemachine.Revocation{ClusterName: req.GetClusterName(), Instance: req.GetInstance(), AllInstances: req.Instance == nil}
	domain, err := requestDomain(req.GetDomain())
	var result statemachine.RevokeResult
	var snap store.Snapshot
	if err == nil {
		result, snap, err = s.store.Revoke(ctx, domain, r, actor(ctx))
	}
	if err != nil {
		st := s.failure("revoke", err)
		s.metrics.revocations.WithLabelValues(resultLabel(st)).Inc()
		return nil, st
	}
	s.metrics.revocations.WithLabelValues(result.Outcome.String()).Inc()
	if result.Outcome == statemachine.RevokeNotHolder {
		return nil, revokeRefusal(domain, r, result.State)
	}
	if result.Outcome == statemachine.Revoked {
		by := actor(ctx)
		s.log.Info("fence leases revoked", "domain", domain, "cluster", r.ClusterName, "instance", r.Instance, "allInstances", r.AllInstances,
			"by", by.Identity, "until", result.Until.Time().Format(time.RFC3339Nano))
	}
	return &fencev1.RevokeFenceResponse{Fence: fenceProto(snap, s.store.LeaseTTL()), RevokedUntil: timestamp(result.Until)}, nil
}

// ForgetCluster removes a cluster's record, unless it holds the fence or is
// taking it over.
func (s *Service) ForgetCluster(ctx context.Context, req *fencev1.ForgetClusterRequest) (*fencev1.ForgetClusterResponse, error) {
	f := statemachine.Forgetting{Cluster: statemachine.Identity{Name: req.GetClusterName(), UID: req.GetClusterUid()}}
	domain, err := requestDomain(req.GetDomain())
	var result statemachine.ForgetResult
	var snap store.Snapshot
	if err == nil {
		result, snap, err = s.store.Forget(ctx, domain, f, actor(ctx))
	}
	if err != nil {
		st := s.failure("forget", err)
		s.metrics.forgets.WithLabelValues(resultLabel(st)).Inc()
		return nil, st
	}
	s.metrics.forgets.WithLabelValues(result.Outcome.String()).Inc()
	if result.Outcome != statemachine.Forgotten {
		return nil, forgetRefusal(domain, f, result)
	}
	s.log.Info("cluster forgotten", "domain", domain, "cluster", f.Cluster.Name, "uid", f.Cluster.UID,
		"highestEpoch", result.Record.HighestEpoch, "by", actor(ctx).Identity)
	return &fencev1.ForgetClusterResponse{
		Fence:     fenceProto(snap, s.store.LeaseTTL()),
		Forgotten: clusterProto(f.Cluster.UID, result.Record),
	}, nil
}

// GetFenceHistory returns a domain's recorded changes, oldest first.
func (s *Service) GetFenceHistory(ctx context.Context, req *fencev1.GetFenceHistoryRequest) (*fencev1.GetFenceHistoryResponse, error) {
	domain, err := requestDomain(req.GetDomain())
	if err != nil {
		return nil, s.failure("history", err)
	}
	var since time.Time
	if req.GetSince() != nil {
		since = req.GetSince().AsTime()
	}
	events, err := s.store.History(ctx, domain, since, int(req.GetLimit()))
	if err != nil {
		return nil, s.failure("history", err)
	}
	resp := &fencev1.GetFenceHistoryResponse{Events: make([]*fencev1.FenceHistoryEvent, 0, len(events))}
	for _, ev := range events {
		resp.Events = append(resp.Events, historyProto(ev))
	}
	return resp, nil
}

// actor is who makes the call ctx belongs to, as the authorization guard
// saw it.
func actor(ctx context.Context) store.Actor {
	c := authz.CallerFrom(ctx)
	method, _ := grpc.Method(ctx)
	return store.Actor{Identity: c.Identity, Method: method, Peer: c.Peer}
}

// requestDomain is the domain a request names, normalized and checked: the
// one place the authority does either.
func requestDomain(domain string) (string, error) {
	domain = rpctypes.NormalizeDomain(domain)
	return domain, rpctypes.ValidateDomain(domain)
}

// failure maps a store error to its status and logs the ones an operator
// must look at: neither bad requests, nor cancellations, nor etcd being
// unreachable (counted in metrics and reported by the readiness check).
func (s *Service) failure(call string, err error) error {
	st := storeError(err)
	if status.Code(st) == codes.Internal {
		s.log.Error(err, "fence store failed", "call", call)
	}
	return st
}

// logDeclaration writes the decision log: the declarations that change who
// holds the fence or who waits for it.
func (s *Service) logDeclaration(domain string, r statemachine.Result) {
	a, h, p := r.Answer, r.State.Holder, r.State.Pending
	switch {
	case a.Outcome == statemachine.Granted:
		kv := []any{"domain", domain, "cluster", h.Name, "uid", h.UID, "epoch", h.Epoch, "token", h.Token, "kind", a.Grant}
		if prev := a.Previous; prev != nil {
			kv = append(kv, "previousCluster", prev.Name, "previousEpoch", prev.Epoch, "previousToken", prev.Token)
		}
		s.log.Info("fence granted", kv...)
	case a.Outcome == statemachine.Acquiring && slices.Contains(r.Events, statemachine.PendingChanged):
		s.log.Info("fence takeover pending", "domain", domain, "cluster", p.Name, "uid", p.UID, "epoch", p.Epoch,
			"holder", h.Name, "holderEpoch", h.Epoch, "leaseLeft", a.RetryAfter.String())
	case a.Outcome == statemachine.Renewed && slices.Contains(r.Events, statemachine.PendingChanged):
		s.log.Info("fence takeover dropped", "domain", domain, "cluster", h.Name, "epoch", h.Epoch, "why", "the holder raised its epoch")
	}
}
