package authority

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority/authz"
)

const (
	// healthInterval is how often the server checks that etcd answers and
	// reports it through gRPC health checking.
	healthInterval = 5 * time.Second
	// healthTimeout bounds one check.
	healthTimeout = 2 * time.Second
	// shutdownGrace is how long calls in flight may take to finish when
	// the server stops.
	shutdownGrace = 10 * time.Second
)

// Server serves a Service over gRPC, with the standard health checking
// service (NOT_SERVING while etcd has no quorum, and during shutdown) and
// server reflection (for grpcurl and similar tools).
type Server struct {
	service *Service
	grpc    *grpc.Server
	health  *health.Server
}

// NewServer builds the gRPC server. Every call passes guard before its
// handler, which authorizes it and records who makes it; nil means a guard
// without a policy, which allows every call, logs its refusals to the
// service's Logger and counts them nowhere. The service reports the calls
// it refuses with PermissionDenied itself (a cluster UID declared under
// another name) to the same guard, which counts and logs them as its own.
// opts add transport credentials and the like; interceptors among them run
// before the guard, so that the RPC metrics (RPCMetrics) count its
// refusals too.
func NewServer(service *Service, guard *authz.Guard, opts ...grpc.ServerOption) *Server {
	if guard == nil {
		guard = service.guard
	}
	service.guard = guard
	opts = append(append([]grpc.ServerOption{
		// Agents keep their connection open between heartbeats; let them
		// probe it, but not more often than this.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	}, opts...), guard.ServerOptions()...)
	s := &Server{service: service, grpc: grpc.NewServer(opts...), health: health.NewServer()}
	fencev1.RegisterFenceServiceServer(s.grpc, service)
	healthpb.RegisterHealthServer(s.grpc, s.health)
	reflection.Register(s.grpc)
	return s
}

// Serve serves on lis until ctx ends, then stops: health turns
// NOT_SERVING, watch streams end, and unary calls in flight get a grace
// period to finish. It returns nil after a stop that ctx asked for.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	run, cancel := context.WithCancel(ctx)
	defer cancel()
	// Report health before serving, so no client sees it unknown.
	s.checkHealth(run)
	var wg sync.WaitGroup
	wg.Go(func() { s.monitorHealth(run) })
	wg.Go(func() {
		<-run.Done()
		s.health.Shutdown()
		s.service.Close()
		timer := time.AfterFunc(shutdownGrace, s.grpc.Stop)
		defer timer.Stop()
		s.grpc.GracefulStop()
	})
	err := s.grpc.Serve(lis)
	cancel()
	wg.Wait()
	if ctx.Err() != nil || err == nil {
		return nil
	}
	return fmt.Errorf("serve gRPC on %s: %w", lis.Addr(), err)
}

// monitorHealth reports through gRPC health checking whether etcd answers,
// until ctx ends.
func (s *Server) monitorHealth(ctx context.Context) {
	ticker := time.NewTicker(healthInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			s.checkHealth(ctx)
		}
	}
}

func (s *Server) checkHealth(ctx context.Context) {
	check, cancel := context.WithTimeout(ctx, healthTimeout)
	defer cancel()
	st := healthpb.HealthCheckResponse_SERVING
	if s.service.Check(check) != nil {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	// After Shutdown the health server ignores updates, so a check cut
	// short by the stop cannot turn it back to SERVING.
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(fencev1.FenceService_ServiceDesc.ServiceName, st)
}
