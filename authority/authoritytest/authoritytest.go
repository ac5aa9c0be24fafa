package authoritytest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/utils/clock"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/authority/authz"
	"github.com/fencegate/fencegate/authority/etcdbackend"
)

// startTimeout bounds starting etcd and re-binding the address.
const startTimeout = 30 * time.Second

// Options configure a test authority.
type Options struct {
	// LeaseTTL is the lease length; 15s if 0.
	LeaseTTL time.Duration
	// Clock is the authority's wall clock; nil means the real one. A fake
	// clock (k8s.io/utils/clock/testing) lets a test expire leases at
	// will: without Monotonic, lease ends are judged by it too.
	Clock clock.PassiveClock
	// Monotonic, if set, is the authority's monotonic clock, by which it
	// judges lease ends (authority.Options.Monotonic).
	Monotonic func() time.Duration
	// ClusterGenerationPeriod is how often a declaring cluster's
	// generation moves on; 0 means the default.
	ClusterGenerationPeriod time.Duration
	// Quiet discards the authority's and etcd's logs instead of logging
	// them to the test. A benchmark's are always discarded: it prints
	// everything it logs, which would bury the figures.
	Quiet bool
	// TLS, if set, serves TLS with it (ClientCAs and ClientAuth for mTLS);
	// reach it with ClientTLS.
	TLS *tls.Config
	// AuthorizationFile, if set, authorizes every call by the file, which
	// is reloaded when it changes; it needs mTLS.
	AuthorizationFile string
	// MaxEpochStep and HistoryLimit are the authority's settings; 0 means
	// their defaults.
	MaxEpochStep uint64
	HistoryLimit int
	// Registerer receives the authority's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Logger, if set, receives the log of the authority and its replicas
	// (its decisions and refusals; etcd's log goes to the test, or nowhere
	// if Quiet).
	Logger logr.Logger
}

// Server is a running fence authority.
type Server struct {
	// Addr is the host:port of the gRPC listener.
	Addr string

	opts Options
	dir  string
	log  logr.Logger

	mu      sync.Mutex
	running *instance
	// replicas are the replicas added, served while the authority runs.
	replicas []*replica
	// registered is set once the authority's metrics went to
	// Options.Registerer.
	registered bool
}

// instance is one run of the authority, between a start and a stop.
type instance struct {
	etcd  *etcdbackend.Embedded
	stop  context.CancelFunc
	serve chan error
	// replicas are the runs of the replicas over this run's etcd.
	replicas []serving
}

// serving is one gRPC server of the authority, until stop.
type serving struct {
	stop  context.CancelFunc
	serve chan error
}

// replica is what a replica keeps across the authority's restarts.
type replica struct {
	addr string
	opts Options
}

// Start runs a real authority: gRPC on 127.0.0.1:<free port>, embedded etcd
// in t.TempDir(); it is stopped when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	s := &Server{opts: opts, dir: filepath.Join(t.TempDir(), "authority-etcd"), log: testr.NewWithInterface(t, testr.Options{})}
	if _, ok := t.(*testing.B); ok || opts.Quiet {
		s.log = logr.Discard()
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for the test authority: %v", err)
	}
	s.Addr = lis.Addr().String()
	t.Cleanup(s.Stop)
	if err := s.start(lis); err != nil {
		t.Fatalf("start the test authority: %v", err)
	}
	return s
}

// Stop stops gRPC and etcd; it is idempotent. Open watch streams end with
// Unavailable; calls fail until Restart.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		return
	}
	for _, r := range s.running.replicas {
		r.stop()
		if err := <-r.serve; err != nil {
			s.log.Error(err, "replica of the test authority stopped with an error")
		}
	}
	s.running.stop()
	if err := <-s.running.serve; err != nil {
		s.log.Error(err, "test authority stopped with an error")
	}
	s.running.etcd.Close()
	s.running = nil
}

// Restart stops the authority, then starts it again on the same address
// and the same data directory: what it stored survives.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	lis, err := listenAgain(s.Addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", s.Addr, err)
	}
	if err := s.start(lis); err != nil {
		t.Fatalf("restart the test authority: %v", err)
	}
}

// Client returns a plaintext client of the authority, closed when the test
// ends. It reconnects quickly after a Restart.
func (s *Server) Client(t testing.TB) fencev1.FenceServiceClient {
	t.Helper()
	return s.dial(t, insecure.NewCredentials())
}

// ClientTLS returns a client of an authority started with Options.TLS,
// presenting what cfg holds (a client certificate for mTLS).
func (s *Server) ClientTLS(t testing.TB, cfg *tls.Config) fencev1.FenceServiceClient {
	t.Helper()
	return s.dial(t, credentials.NewTLS(cfg))
}

func (s *Server) dial(t testing.TB, creds credentials.TransportCredentials) fencev1.FenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(s.Addr,
		grpc.WithTransportCredentials(creds),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
			MinConnectTimeout: 5 * time.Second,
		}),
	)
	if err != nil {
		t.Fatalf("client of the test authority: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return fencev1.NewFenceServiceClient(conn)
}

func (s *Server) start(lis net.Listener) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	e, err := etcdbackend.StartEmbedded(ctx, etcdbackend.EmbeddedOptions{Dir: s.dir, Logger: s.log})
	if err != nil {
		_ = lis.Close()
		return err
	}
	// A restart registers the metrics again: on a registry of its own.
	reg := s.opts.Registerer
	if s.registered || reg == nil {
		reg = prometheus.NewRegistry()
	}
	s.registered = true
	stop, serve, err := serveAuthority(e.Client(), lis, s.opts, s.authorityLog(), reg)
	if err != nil {
		e.Close()
		return err
	}
	inst := &instance{etcd: e, stop: stop, serve: serve}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = inst
	for _, r := range s.replicas {
		lis, err := listenAgain(r.addr)
		if err != nil {
			return fmt.Errorf("listen again on %s for a replica: %w", r.addr, err)
		}
		if err := inst.serveReplica(r, lis, s.authorityLog()); err != nil {
			return err
		}
	}
	return nil
}

// authorityLog is the log of the authority and its replicas.
func (s *Server) authorityLog() logr.Logger {
	if s.opts.Logger.GetSink() != nil {
		return s.opts.Logger
	}
	return s.log
}

// serveReplica serves replica r on lis over the run's etcd.
func (inst *instance) serveReplica(r *replica, lis net.Listener, log logr.Logger) error {
	stop, serve, err := serveAuthority(inst.etcd.Client(), lis, r.opts, log, prometheus.NewRegistry())
	if err != nil {
		return fmt.Errorf("start a replica of the test authority: %w", err)
	}
	inst.replicas = append(inst.replicas, serving{stop: stop, serve: serve})
	return nil
}

// serveAuthority serves the authority opts describe on lis, over an etcd
// client, until stop is called; serve receives Serve's error. It closes lis
// if it fails.
func serveAuthority(client *clientv3.Client, lis net.Listener, opts Options, log logr.Logger, reg prometheus.Registerer) (stop context.CancelFunc, serve chan error, err error) {
	svc, err := authority.New(client, authority.Options{
		LeaseTTL:     opts.LeaseTTL,
		MaxEpochStep: opts.MaxEpochStep,
		HistoryLimit: opts.HistoryLimit,
		Clock:        opts.Clock,
		Monotonic:    opts.Monotonic,
		Logger:       log,
		Registerer:   reg,

		ClusterGenerationPeriod: opts.ClusterGenerationPeriod,
	})
	if err != nil {
		_ = lis.Close()
		return nil, nil, err
	}
	run, stop := context.WithCancel(context.Background())
	guardOpts := authz.GuardOptions{Logger: log, Registerer: reg}
	// A fake clock expires client certificates too.
	if c, ok := opts.Clock.(clock.WithDelayedExecution); ok {
		guardOpts.Clock = c
	}
	if opts.AuthorizationFile != "" {
		source, err := authz.NewSource(opts.AuthorizationFile, authz.SourceOptions{Logger: log, Registerer: reg})
		if err != nil {
			stop()
			_ = lis.Close()
			return nil, nil, err
		}
		go func() { _ = source.Start(run) }()
		guardOpts.Policy = source.Policy
	}
	guard, err := authz.NewGuard(guardOpts)
	if err != nil {
		stop()
		_ = lis.Close()
		return nil, nil, err
	}
	var grpcOpts []grpc.ServerOption
	if opts.TLS != nil {
		grpcOpts = append(grpcOpts, grpc.Creds(guard.Credentials(credentials.NewTLS(opts.TLS))))
	}
	serve = make(chan error, 1)
	srv := authority.NewServer(svc, guard, grpcOpts...)
	go func() { serve <- srv.Serve(run, lis) }()
	return stop, serve, nil
}

// ReplicaOptions are what a replica of a test authority has of its own.
type ReplicaOptions struct {
	// Clock and Monotonic are the replica's clocks; nil means the real
	// ones.
	Clock     clock.PassiveClock
	Monotonic func() time.Duration
}

// Replica is another replica of a test authority: its own gRPC listener
// and clocks, sharing the authority's etcd and every other setting.
type Replica struct {
	// Addr is the host:port of the replica's gRPC listener.
	Addr string
}

// AddReplica starts another replica of the authority on its etcd. It
// stops and starts again with the authority, on the same address, and is
// stopped when the test ends.
func (s *Server) AddReplica(t testing.TB, ro ReplicaOptions) *Replica {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen for a replica of the test authority: %v", err)
	}
	r := &replica{addr: lis.Addr().String(), opts: s.opts}
	r.opts.Clock, r.opts.Monotonic = ro.Clock, ro.Monotonic
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running == nil {
		_ = lis.Close()
		t.Fatal("add a replica to a stopped test authority")
	}
	if err := s.running.serveReplica(r, lis, s.authorityLog()); err != nil {
		t.Fatal(err)
	}
	s.replicas = append(s.replicas, r)
	return &Replica{Addr: r.addr}
}

// listenAgain binds addr, waiting while the port is still held by the
// listener that was just closed.
func listenAgain(addr string) (net.Listener, error) {
	deadline := time.Now().Add(startTimeout)
	for {
		lis, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return lis, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}
