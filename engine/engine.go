package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/promreg"
)

// ErrNotReady is returned by evaluations before the fence agent wrote a
// fence state: the policies would only be answering from a guess.
var ErrNotReady = errors.New("no fence state has been written yet (the fence agent writes it after its first declaration)")

// Options configure an Engine.
type Options struct {
	// PolicyDir holds the *.rego policies (a mounted ConfigMap, say); Rego
	// unit tests (*_test.rego) in it are left out. Empty means the shipped
	// policies embedded in the binary.
	PolicyDir string
	// ConfigFiles and ConfigFile are YAML or JSON files whose objects make up
	// data.fencegate.config, ConfigFile last; later files override earlier
	// keys. No file means the policies' defaults.
	ConfigFiles []string
	ConfigFile  string
	// Logger receives reload results; evaluations do not log.
	Logger logr.Logger
	// Registerer, if set, registers the engine's metrics.
	Registerer prometheus.Registerer
	// Clock tells the time; nil means the real clock.
	Clock clock.Clock
	// ReloadDelay is how long Start waits for a burst of file changes to
	// settle before reloading; 0 means 200ms.
	ReloadDelay time.Duration
	// Domains are the fence domains served, the default first (see
	// domain.Served); none means rpctypes.DefaultDomain alone. Each has a
	// data.fence of its own, which the agent of that domain writes.
	Domains []string
	// Namespaces gives the namespaces' domain labels, for objects that
	// have none of their own; nil when namespaces name no domains.
	Namespaces domain.Namespaces
	// HoldKinds are the resources the hold controller holds (its
	// --hold-kinds). With any, a revision serves only if its
	// data.fencegate.hold.decision decides a synthetic object of each of
	// them, and the objects lately decided, without error in every fence
	// status: were it missing or failing, nothing would be held and a
	// fenced cluster's actuators would run. None means the hold decision
	// is not required, nor tried.
	HoldKinds []schema.GroupResource
}

// Engine loads and hot-reloads the policies, holds the fence state the agent
// writes, and evaluates admission and reconcile decisions. It is safe for
// concurrent use.
type Engine struct {
	policyDir   string
	configFiles []string
	log         logr.Logger
	clock       clock.Clock
	reloadDelay time.Duration
	reloads     *prometheus.CounterVec

	// domains resolves an object's fence domain.
	domains domain.Resolver
	// served are the domains served, the default first.
	served []string
	// current is the view evaluations read; writers replace it.
	current atomic.Pointer[view]
	// mu serializes the writers of current: fence writes and the swap of
	// a reloaded revision.
	mu sync.Mutex
	// reloadMu serializes reloads, which build and try a revision without
	// holding mu, so that fence writes never wait for a compile.
	reloadMu sync.Mutex
	// status is the policy status shown on the status endpoint; only
	// reloads write it.
	status atomic.Pointer[PolicyStatus]
	// recent are the reviews a reloaded revision is tried on.
	recent recentReviews
	// holdKinds are Options.HoldKinds; recentHolds the hold inputs a
	// reloaded revision is tried on.
	holdKinds   []schema.GroupResource
	recentHolds recentHolds
}

// PolicyStatus describes the policies in force and the last reload.
type PolicyStatus struct {
	// Revision is the content hash of the active policies and config.
	Revision string `json:"revision"`
	// Source is the policy directory, or "embedded" for the shipped ones.
	Source string `json:"source"`
	// Files are the active policy files.
	Files []string `json:"files"`
	// ConfigFiles are the config files read into data.fencegate.config.
	ConfigFiles []string `json:"configFiles,omitempty"`
	// ActiveSince is when the active revision was loaded.
	ActiveSince time.Time `json:"activeSince"`
	// LastReload is the result of the last reload attempt, if any was made
	// after the first load.
	LastReload *ReloadResult `json:"lastReload,omitempty"`
}

// ReloadResult is the outcome of one reload.
type ReloadResult struct {
	// Time is when the reload ran.
	Time time.Time `json:"time"`
	// Result is "success" or "error".
	Result string `json:"result"`
	// Revision is the revision that was loaded or tried, when the files
	// could be read.
	Revision string `json:"revision,omitempty"`
	// Error is what went wrong, with the compiler's messages.
	Error string `json:"error,omitempty"`
}

// New loads and compiles the policies and the config, and tries them on
// synthetic reviews, a Component's reconcile and, with HoldKinds, the hold
// of an object of each held kind, in every fence status. It fails when they
// do not compile or fail at evaluation: there is no last good revision to
// fall back to yet.
func New(opts Options) (*Engine, error) {
	e := &Engine{
		policyDir:   opts.PolicyDir,
		configFiles: opts.ConfigFiles,
		log:         opts.Logger,
		clock:       opts.Clock,
		reloadDelay: opts.ReloadDelay,
		holdKinds:   slices.Clone(opts.HoldKinds),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_policy_reloads_total",
			Help: "Policy and config reloads by result (success or error); on error the last good policies stay in force.",
		}, []string{"result"}),
	}
	if opts.ConfigFile != "" {
		e.configFiles = append(append([]string(nil), e.configFiles...), opts.ConfigFile)
	}
	if e.clock == nil {
		e.clock = clock.RealClock{}
	}
	if e.reloadDelay <= 0 {
		e.reloadDelay = 200 * time.Millisecond
	}
	if e.log.GetSink() == nil {
		e.log = logr.Discard()
	}
	served := opts.Domains
	if len(served) == 0 {
		served = []string{rpctypes.DefaultDomain}
	}
	served, err := domain.Served(served[0], served[1:])
	if err != nil {
		return nil, fmt.Errorf("policy engine: %w", err)
	}
	e.served, e.domains = served, domain.Resolver{Default: served[0], Namespaces: opts.Namespaces}
	src, err := e.readSource()
	if err != nil {
		return nil, err
	}
	p, err := compilePolicy(src)
	if err != nil {
		return nil, err
	}
	v, err := newView(context.Background(), p, e.served, nil)
	if err != nil {
		return nil, err
	}
	if err := e.try(context.Background(), p, v.domains[e.served[0]]); err != nil {
		return nil, err
	}
	// Both results are exported from the start, so that a dashboard sees
	// zero errors rather than no series.
	e.reloads.WithLabelValues("success")
	e.reloads.WithLabelValues("error")
	if err := promreg.Register(opts.Registerer, "engine", e.reloads, newPolicyCollector(e)); err != nil {
		return nil, err
	}
	e.current.Store(v)
	status := e.activeStatus(p, e.clock.Now())
	e.status.Store(&status)
	e.logLoaded(v)
	return e, nil
}

func (e *Engine) source() string {
	if e.policyDir == "" {
		return "embedded"
	}
	return e.policyDir
}

// activeStatus is the status of policy revision p, in force since since.
func (e *Engine) activeStatus(p *policy, since time.Time) PolicyStatus {
	return PolicyStatus{
		Revision:    p.revision,
		Source:      e.source(),
		Files:       p.files,
		ConfigFiles: e.configFiles,
		ActiveSince: since,
	}
}

// readSource reads the policy files and the config, and hashes them.
func (e *Engine) readSource() (policySource, error) {
	files, err := readPolicyFiles(e.policyDir)
	if err != nil {
		return policySource{}, err
	}
	config, unknown, err := loadConfig(e.configFiles)
	if err != nil {
		return policySource{}, err
	}
	revision, err := revisionOf(files, config)
	if err != nil {
		return policySource{}, err
	}
	return policySource{files: files, config: config, unknownConfigKeys: unknown, revision: revision}, nil
}

// logLoaded logs the revision of v, just put in force.
func (e *Engine) logLoaded(v *view) {
	p := v.policy
	e.log.Info("policies loaded", "revision", p.revision, "source", e.source(), "files", p.files, "configFiles", e.configFiles)
	if len(p.unknownConfigKeys) > 0 {
		e.log.Info("config has keys the shipped policies do not read",
			"keys", p.unknownConfigKeys, "effect", "passed to the policies as they are")
	}
	e.logResidualError(v.domains[e.served[0]])
}

// logResidualError reports once per revision that requests are evaluated
// with the full policy (correct, but slower) when that was not asked for.
func (e *Engine) logResidualError(s *snapshot) {
	if s.residualErr == nil {
		return
	}
	if s.policy.residualLogged.CompareAndSwap(false, true) {
		e.log.Info("partial evaluation gave no usable residual",
			"revision", s.policy.revision, "reason", s.residualErr.Error(),
			"effect", "admission requests are evaluated with the policy as written, which is slower")
	}
}

// WriteFence stores the fence state of its domain (state.Domain; empty
// means the default domain) that the policies read as data.fence for the
// objects of that domain. When it returns, every new evaluation sees the
// new state; evaluations in flight finish with the one they started with.
// The other domains' snapshots are left as they are.
func (e *Engine) WriteFence(ctx context.Context, state fencestate.State) error {
	if state.Status == "" {
		return errors.New("write fence state: the state has no status")
	}
	d := state.Domain
	if d == "" {
		d = e.served[0]
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	current := e.current.Load()
	prev, ok := current.domains[d]
	if !ok {
		return fmt.Errorf("write fence state: domain %q is not served here (served: %s)", d, strings.Join(e.served, ", "))
	}
	snap, err := newSnapshot(ctx, current.policy, &state, prev)
	if err != nil {
		return fmt.Errorf("write fence state of domain %s: %w", d, err)
	}
	e.logResidualError(snap)
	e.current.Store(current.with(d, snap))
	return nil
}

// Domains are the fence domains served, the default first.
func (e *Engine) Domains() []string { return slices.Clone(e.served) }

// Serves says whether domain is one of the fence domains served.
func (e *Engine) Serves(domain string) bool { return slices.Contains(e.served, domain) }

// DomainOf returns the fence domain of an object in namespace whose
// domain.Label is label ("" when it has none).
func (e *Engine) DomainOf(ctx context.Context, namespace, label string) (string, error) {
	return e.domains.Of(ctx, namespace, label)
}

// Fence returns the fence state the policies see now for domain's
// objects, and false until its agent wrote one (always, for a domain not
// served). An active state whose validity has passed is returned as
// unknown, as the policies see it.
func (e *Engine) Fence(domain string) (fencestate.State, bool) {
	snap, ok := e.current.Load().domains[domain]
	if !ok || !snap.hasFence {
		return fencestate.State{}, false
	}
	if applies, err := snap.at(context.Background(), e.clock.Now()); err == nil {
		snap = applies
	}
	return snap.fence, true
}

// Ready returns nil once the policies are compiled and every served domain
// has a fence state, and otherwise says what is missing.
func (e *Engine) Ready() error {
	v := e.current.Load()
	var missing []string
	for _, d := range e.served {
		if !v.domains[d].hasFence {
			missing = append(missing, d)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: no fence state yet for domain %s", ErrNotReady, strings.Join(missing, ", "))
	}
	return nil
}

// PolicyStatus returns the active policy revision and the last reload result.
func (e *Engine) PolicyStatus() PolicyStatus {
	return *e.status.Load()
}

// Revision returns the active policy revision.
func (e *Engine) Revision() string {
	return e.current.Load().policy.revision
}

// Reconcile evaluates data.fencegate.reconcile.decision for a Component of
// domain (input {"component": component}), with that domain's data.fence.
func (e *Engine) Reconcile(ctx context.Context, domain string, component map[string]any) (ReconcileDecision, error) {
	now := e.clock.Now()
	snap, err := e.current.Load().snapshot(domain).at(ctx, now)
	if err != nil {
		return ReconcileDecision{}, err
	}
	if !snap.hasFence {
		return ReconcileDecision{}, ErrNotReady
	}
	return snap.reconcile(ctx, component, now)
}

// reconcile evaluates the reconcile decision with the snapshot's data.
func (s *snapshot) reconcile(ctx context.Context, component map[string]any, now time.Time) (ReconcileDecision, error) {
	input, err := ast.InterfaceToValue(map[string]any{"component": component})
	if err != nil {
		return ReconcileDecision{}, fmt.Errorf("reconcile input: %w", err)
	}
	rs, err := s.policy.reconcile.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTransaction(s.txn), rego.EvalTime(now))
	if err != nil {
		return ReconcileDecision{}, fmt.Errorf("evaluate %v: %w", reconcileEntryPoint, err)
	}
	return reconcileDecision(rs)
}

// Reload reads the policies and the config again and, when they changed,
// compile and pass their trial (Engine.try: synthetic reviews in every
// fence status and the last few reviews decided), puts them in force. When
// they do not, the last good revision stays in force; the error is logged,
// counted and shown in PolicyStatus.
func (e *Engine) Reload(ctx context.Context) error {
	e.reloadMu.Lock()
	defer e.reloadMu.Unlock()
	now := e.clock.Now()
	current := e.current.Load()
	status := *e.status.Load()

	fail := func(revision string, err error) error {
		e.reloads.WithLabelValues("error").Inc()
		status.LastReload = &ReloadResult{Time: now, Result: "error", Revision: revision, Error: err.Error()}
		e.status.Store(&status)
		e.log.Error(err, "policy reload failed",
			"activeRevision", current.policy.revision, "triedRevision", revision,
			"effect", "the last good policies stay in force")
		return err
	}

	src, err := e.readSource()
	if err != nil {
		return fail("", err)
	}
	if src.revision == current.policy.revision {
		// Nothing changed, or a broken change was undone.
		if status.LastReload != nil && status.LastReload.Result == "error" {
			e.reloads.WithLabelValues("success").Inc()
			status.LastReload = &ReloadResult{Time: now, Result: "success", Revision: src.revision}
			e.status.Store(&status)
			e.log.Info("policies are back to the active revision", "revision", src.revision)
		}
		return nil
	}
	p, err := compilePolicy(src)
	if err != nil {
		return fail(src.revision, err)
	}
	v, err := newView(ctx, p, e.served, current.states())
	if err != nil {
		return fail(src.revision, err)
	}
	if err := e.try(ctx, p, v.domains[e.served[0]]); err != nil {
		return fail(src.revision, err)
	}
	e.mu.Lock()
	if latest := e.current.Load(); latest != current {
		// A fence moved while the revision was tried (every status was
		// tried): it serves the states in force now.
		if v, err = newView(ctx, p, e.served, latest.states()); err != nil {
			e.mu.Unlock()
			return fail(src.revision, err)
		}
	}
	e.current.Store(v)
	e.mu.Unlock()
	e.reloads.WithLabelValues("success").Inc()
	status = e.activeStatus(p, now)
	status.LastReload = &ReloadResult{Time: now, Result: "success", Revision: p.revision}
	e.status.Store(&status)
	e.logLoaded(v)
	return nil
}
