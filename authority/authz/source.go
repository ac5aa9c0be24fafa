package authz

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/internal/filewatch"
	"github.com/fencegate/fencegate/internal/promreg"
)

// reloadDelay is how long the file must be quiet before a reload, so that
// an editor's or the kubelet's burst of writes is read once.
const reloadDelay = 200 * time.Millisecond

// Source keeps the policy of an authorization file: the last one that
// parsed. A file that no longer parses leaves the last good policy in
// force, and says so in the log, in the metrics and in Status. Each policy
// it replaces is told so (Policy.Replaced).
type Source struct {
	path    string
	log     logr.Logger
	clock   clock.Clock
	metrics *sourceMetrics

	current atomic.Pointer[loaded]
	mu      sync.Mutex
	status  Status
}

// loaded is a policy with where it came from.
type loaded struct {
	policy   *Policy
	revision string
}

// Status says which revision of the file is in force and whether the last
// reload failed.
type Status struct {
	// Path is the authorization file.
	Path string
	// Revision is a hash of the file content in force.
	Revision string
	// LoadedAt is when that content was loaded.
	LoadedAt time.Time
	// Error is why the last reload failed; empty when it succeeded.
	Error string
	// FailedAt is when the last reload failed.
	FailedAt time.Time
}

// SourceOptions configure a Source.
type SourceOptions struct {
	// Logger receives one line per reload.
	Logger logr.Logger
	// Registerer receives the reload metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Clock is the source of time; nil means the real clock.
	Clock clock.Clock
}

// NewSource loads the authorization file at path; it must parse.
func NewSource(path string, opts SourceOptions) (*Source, error) {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	m, err := newSourceMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Source{path: path, log: opts.Logger, clock: opts.Clock, metrics: m, status: Status{Path: path}}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Policy returns the policy in force.
func (s *Source) Policy() *Policy { return s.current.Load().policy }

// Status returns the revision in force and the last reload's failure.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.status
}

// Reload reads the file again. On success its policy is in force; on
// failure the last good one stays, and the error is logged, counted and
// kept in Status.
func (s *Source) Reload() error {
	data, err := os.ReadFile(s.path)
	if err != nil {
		err = fmt.Errorf("read authorization file: %w", err)
	}
	var policy *Policy
	if err == nil {
		policy, err = Parse(data)
	}
	sum := sha256.Sum256(data)
	revision := hex.EncodeToString(sum[:6])
	now := s.clock.Now()

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.metrics.reloads.WithLabelValues("error").Inc()
		s.metrics.lastSuccess.Set(0)
		s.status.Error, s.status.FailedAt = err.Error(), now
		if prev := s.current.Load(); prev != nil {
			s.log.Error(err, "authorization file reload failed", "path", s.path, "inForce", prev.revision, "effect", "the last good file stays in force")
		}
		return fmt.Errorf("%s: %w", s.path, err)
	}
	s.metrics.reloads.WithLabelValues("success").Inc()
	s.metrics.lastSuccess.Set(1)
	prev := s.current.Load()
	if prev != nil && prev.revision == revision && s.status.Error == "" {
		return nil
	}
	s.current.Store(&loaded{policy: policy, revision: revision})
	if prev != nil {
		// Each policy is put in force once and replaced once, under s.mu:
		// what it allowed is decided again by the new one.
		close(prev.policy.replaced)
	}
	s.status = Status{Path: s.path, Revision: revision, LoadedAt: now}
	s.log.Info("authorization file loaded", "path", s.path, "revision", revision)
	return nil
}

// Start reloads the file whenever it changes, until ctx ends.
func (s *Source) Start(ctx context.Context) error {
	base := filepath.Clean(s.path)
	return filewatch.Run(ctx, filewatch.Options{
		Dirs:     []string{filepath.Dir(base)},
		Relevant: func(name string) bool { return filepath.Clean(name) == base },
		Delay:    reloadDelay,
		Clock:    s.clock,
		// A failed reload is logged, counted and shown by Reload.
		OnChange: func() { _ = s.Reload() },
		OnError: func(err error) {
			s.log.Error(err, "authorization file watch failed; reloading", "path", s.path)
		},
	})
}

type sourceMetrics struct {
	reloads     *prometheus.CounterVec
	lastSuccess prometheus.Gauge
}

func newSourceMetrics(reg prometheus.Registerer) (*sourceMetrics, error) {
	m := &sourceMetrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_authority_authorization_reloads_total",
			Help: "Loads of the authorization file, by result: success, or error (the last good file stays in force).",
		}, []string{"result"}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "fencegate_authority_authorization_last_reload_successful",
			Help: "1 when the last load of the authorization file succeeded, 0 when the last good one is in force instead.",
		}),
	}
	if err := promreg.Register(reg, "authorization", m.reloads, m.lastSuccess); err != nil {
		return nil, err
	}
	return m, nil
}
