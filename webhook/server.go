package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/internal/tlsutil"
)

// Routes the server answers.
const (
	// PathValidate is the validating admission endpoint.
	PathValidate = "/validate"
	// PathMutate is the mutating admission endpoint.
	PathMutate = "/mutate"
	// PathPolicyStatus shows the active policy revision and the last reload.
	PathPolicyStatus = "/status/policy"
)

// Options configure a Server.
type Options struct {
	// Addr is the address to serve on, host:port (":9443").
	Addr string
	// Listener, if set, is served instead of listening on Addr.
	Listener net.Listener
	// CertDir holds the serving certificate and key, CertName and KeyName
	// ("tls.crt" and "tls.key" when empty, as in a kubernetes.io/tls
	// Secret). They are re-read when they change.
	CertDir           string
	CertName, KeyName string
	// Engine decides.
	Engine *engine.Engine
	// Registerer, if set, registers the webhook's metrics.
	Registerer prometheus.Registerer
	// Logger receives the decision log (one line per admission request)
	// and server errors.
	Logger logr.Logger
	// Clock measures durations; nil means the real clock.
	Clock clock.PassiveClock
}

// Server serves the admission endpoints and the policy status over TLS.
// Health, readiness and metrics are the process's, served by the manager
// (cmd/fencegate), whose readiness also covers the webhook's certificates.
type Server struct {
	opts    Options
	engine  *engine.Engine
	log     logr.Logger
	clock   clock.PassiveClock
	metrics *metrics
	handler http.Handler
}

// New checks the options and registers the metrics.
func New(opts Options) (*Server, error) {
	if opts.Engine == nil {
		return nil, errors.New("webhook: no engine")
	}
	if opts.Addr == "" && opts.Listener == nil {
		return nil, errors.New("webhook: no address to serve on")
	}
	if opts.CertDir == "" {
		return nil, errors.New("webhook: no certificate directory")
	}
	if opts.CertName == "" {
		opts.CertName = "tls.crt"
	}
	if opts.KeyName == "" {
		opts.KeyName = "tls.key"
	}
	s := &Server{opts: opts, engine: opts.Engine, log: opts.Logger, clock: opts.Clock}
	if s.log.GetSink() == nil {
		s.log = logr.Discard()
	}
	if s.clock == nil {
		s.clock = clock.RealClock{}
	}
	var err error
	if s.metrics, err = newMetrics(opts.Registerer); err != nil {
		return nil, fmt.Errorf("webhook: register metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(PathValidate, admissionHandler{Server: s, endpoint: validate})
	mux.Handle(PathMutate, admissionHandler{Server: s, endpoint: mutate})
	mux.HandleFunc("GET "+PathPolicyStatus, s.policyStatus)
	s.handler = mux
	return s, nil
}

// Handler returns the server's routes, for serving them some other way
// (tests, a shared listener).
func (s *Server) Handler() http.Handler { return s.handler }

func (s *Server) policyStatus(w http.ResponseWriter, _ *http.Request) {
	out, err := json.MarshalIndent(s.engine.PolicyStatus(), "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(append(out, '\n'))
}

// Start serves over TLS until ctx ends, then stops accepting requests and
// lets those in flight finish (for up to 10 seconds). The certificate files
// are re-read whenever they change.
func (s *Server) Start(ctx context.Context) error {
	tlsConfig, watcher, err := tlsutil.Server(tlsutil.ServerFiles{
		CertFile: filepath.Join(s.opts.CertDir, s.opts.CertName),
		KeyFile:  filepath.Join(s.opts.CertDir, s.opts.KeyName),
	})
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	ln := s.opts.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", s.opts.Addr); err != nil {
			return fmt.Errorf("webhook: listen on %s: %w", s.opts.Addr, err)
		}
	}
	srv := &http.Server{
		Handler:           s.handler,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	s.log.Info("webhook serving", "address", ln.Addr().String(), "certDir", s.opts.CertDir)
	// The first of serving, watching the certificate and ctx to end stops
	// the other two.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return tlsutil.RunWatcher(gctx, watcher) })
	g.Go(func() error {
		if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(gctx), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			// Requests still running after the grace period are cut off. An
			// HTTP/2 connection whose handshake ends after Shutdown began
			// also keeps Shutdown waiting (golang/go#81153): that is no
			// failure of the server, so it is logged, not returned.
			s.log.Info("shutdown grace period ended", "reason", err.Error(), "effect", "closing the connections still open")
			return srv.Close()
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	return nil
}
