package gate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/internal/notify"
)

// Defaults of Options.
const (
	// DefaultNamespace is where fencegate's chart runs it.
	DefaultNamespace = "fencegate"
	// DefaultClockSkew is taken off every hold's end.
	DefaultClockSkew = time.Second
	// DefaultRequeue is how long a held-back reconcile waits before it is
	// tried again, besides the re-enqueue on every transition.
	DefaultRequeue = 30 * time.Second
	// DefaultWebhookCheck is how often the Gate reads the cluster's
	// webhook configurations again to tell which gated kinds no fencegate
	// webhook fences.
	DefaultWebhookCheck = 5 * time.Minute
)

// DomainEnv is the environment variable that gives Options.Domain when it
// is empty: the one `fencegate run --domain` reads (the chart sets it from
// its value domain), so that an operator's Deployment can take fencegate's
// default domain from the same value.
const DomainEnv = "FENCEGATE_DOMAIN"

// Options configure a Gate. Zero values take the defaults.
type Options struct {
	// Domain is the fence domain of objects that name none (no
	// fencegate.dev/domain label on them or on their namespace): it must
	// be fencegate's default domain (`fencegate run --domain`), which its
	// webhook judges them by. When empty, the value of DomainEnv; when
	// that is unset too, the Gate takes the name of the cluster's only
	// Fence (a fencegate that serves one domain has one Fence, named after
	// it), and with no Fence or several it refuses to act for objects that
	// name no domain (FenceUnknown) rather than guess.
	Domain string
	// Namespace is where fencegate runs: it holds the replicas' membership
	// Leases, which this process must be allowed to list and watch.
	// DefaultNamespace when empty.
	Namespace string
	// ClockSkew is taken off the end of every hold. The Gate takes the
	// earlier of two ends of a replica's published hold: its wall-clock
	// end, which is late by how far this process's clock is behind the
	// replica's, and the time it has left as the replica wrote it
	// (hold-valid-until less the Lease's renewTime, both on the replica's
	// clock) counted on this process's monotonic clock from when its cache
	// took that Lease, which is late by how long the Lease took to get
	// here. ClockSkew bounds either.
	ClockSkew time.Duration
	// Requeue is how long a reconcile held back by the fence waits before
	// it is tried again, besides the re-enqueue on every transition.
	Requeue time.Duration
	// Clock is the source of time; nil means the real clock.
	Clock clock.WithDelayedExecution
	// Logger receives the transitions; nil means the manager's.
	Logger *logr.Logger
	// WebhookCheck is how often the Gate reads the cluster's webhook
	// configurations again, besides at start, to tell which gated kinds
	// no fencegate webhook fences (fencegate_gate_unfenced_kinds);
	// DefaultWebhookCheck when zero, never again when negative.
	WebhookCheck time.Duration
	// Registerer registers the Gate's metrics; nil means controller-
	// runtime's registry, which the manager serves.
	Registerer prometheus.Registerer
}

// Hold is the fence of one domain as the Gate sees it at a moment.
type Hold struct {
	// Domain is the fence domain.
	Domain string
	// Holding is true while this cluster holds the fence and a fencegate
	// replica proves that its hold is live.
	Holding bool
	// Token and Epoch are the fencing token and this cluster's epoch while
	// Holding.
	Token, Epoch int64
	// Until is when Holding ends without news from fencegate; zero when not
	// Holding.
	Until time.Time
	// Reason and Message say why the cluster does not hold the fence: the
	// Fence's Holding condition's, or FenceUnknown when no live hold is
	// proven. They are the SourceConflict condition's.
	Reason, Message string
}

// same says whether h and o are the same hold: a renewal only moves Until.
func (h Hold) same(o Hold) bool {
	return h.Holding == o.Holding && h.Token == o.Token && h.Epoch == o.Epoch && h.Reason == o.Reason && h.Message == o.Message
}

// Gate decides whether this cluster may act for an object, from the Fence
// and the replicas' Leases in the caches. It is a manager Runnable that New
// adds; its methods are safe for concurrent use.
type Gate struct {
	opts       Options
	client     client.Client
	fences     cache.Cache
	leases     cache.Cache
	namespaces domain.Namespaces
	scheme     *runtime.Scheme
	log        logr.Logger
	events     chan struct{}
	synced     chan struct{}
	// observed is when the Leases cache took each Lease version.
	observed *observations
	// webhooks tells the gated kinds that no fencegate webhook fences.
	webhooks *webhookCheck
	mu       sync.Mutex
	// defaultDomain is the domain of objects that name none; "" while it
	// is not known (no Options.Domain, and not one Fence).
	defaultDomain string
	last          map[string]Hold
	inflight      map[string]map[*holdContext]struct{}
	watchers      []func(domain string)
}

// New makes a Gate for the manager's cluster and adds it to the manager.
// It reads the Fences and Namespaces through the manager's cache, and the
// membership Leases through a cache of its own, narrowed to opts.Namespace.
func New(mgr manager.Manager, opts Options) (*Gate, error) {
	if opts.Domain == "" {
		opts.Domain = os.Getenv(DomainEnv)
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.ClockSkew == 0 {
		opts.ClockSkew = DefaultClockSkew
	}
	if opts.Requeue == 0 {
		opts.Requeue = DefaultRequeue
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.WebhookCheck == 0 {
		opts.WebhookCheck = DefaultWebhookCheck
	}
	if opts.Registerer == nil {
		opts.Registerer = ctrlmetrics.Registry
	}
	if opts.ClockSkew < 0 || opts.Requeue < 0 {
		return nil, fmt.Errorf("gate: ClockSkew %s and Requeue %s must not be negative", opts.ClockSkew, opts.Requeue)
	}
	member, err := labels.NewRequirement(membership.LabelDomain, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("gate: select the membership Leases: %w", err)
	}
	observed := newObservations(opts.Clock)
	leases, err := cache.New(mgr.GetConfig(), cache.Options{
		Scheme:            mgr.GetScheme(),
		Mapper:            mgr.GetRESTMapper(),
		DefaultNamespaces: map[string]cache.Config{opts.Namespace: {}},
		// The transform runs before the cache stores a Lease: it dates
		// when this process first saw each version.
		ByObject: map[client.Object]cache.ByObject{&coordinationv1.Lease{}: {Label: labels.NewSelector().Add(*member), Transform: observed.transform}},
	})
	if err != nil {
		return nil, fmt.Errorf("gate: cache of the membership Leases in %s: %w", opts.Namespace, err)
	}
	log := mgr.GetLogger().WithName("gate")
	if opts.Logger != nil {
		log = *opts.Logger
	}
	webhooks, err := newWebhookCheck(mgr, opts.Registerer, log)
	if err != nil {
		return nil, err
	}
	g := &Gate{
		opts:          opts,
		client:        mgr.GetClient(),
		fences:        mgr.GetCache(),
		leases:        leases,
		namespaces:    domain.NewNamespaceLabels(mgr.GetCache(), mgr.GetCache(), mgr.GetAPIReader()),
		scheme:        mgr.GetScheme(),
		log:           log,
		events:        notify.New(),
		synced:        make(chan struct{}),
		observed:      observed,
		webhooks:      webhooks,
		defaultDomain: opts.Domain,
		last:          map[string]Hold{},
		inflight:      map[string]map[*holdContext]struct{}{},
	}
	for _, r := range []manager.Runnable{leases, g} {
		if err := mgr.Add(r); err != nil {
			return nil, fmt.Errorf("gate: add to the manager: %w", err)
		}
	}
	return g, nil
}

// Start watches the Fences and Leases, and tells every transition: a
// domain's hold that changes, or ends with its validity.
func (g *Gate) Start(ctx context.Context) error {
	for _, w := range []struct {
		cache cache.Cache
		obj   client.Object
	}{{g.fences, &fencegatev1alpha1.Fence{}}, {g.leases, &coordinationv1.Lease{}}} {
		inf, err := w.cache.GetInformer(ctx, w.obj)
		if err != nil {
			return fmt.Errorf("gate: watch %T: %w", w.obj, err)
		}
		signal := func(any) { notify.Signal(g.events) }
		deleted := signal
		if _, isLease := w.obj.(*coordinationv1.Lease); isLease {
			deleted = func(o any) { g.observed.forget(o); signal(o) }
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
			AddFunc: signal, UpdateFunc: func(_, o any) { signal(o) }, DeleteFunc: deleted,
		}); err != nil {
			return fmt.Errorf("gate: watch %T: %w", w.obj, err)
		}
		if !w.cache.WaitForCacheSync(ctx) {
			return nil
		}
	}
	g.recheck(ctx)
	close(g.synced)
	go g.webhooks.run(ctx, g.opts.Clock, g.opts.WebhookCheck)
	var expiry clock.Timer
	for {
		var expired <-chan time.Time
		if next := g.nextEnd(); !next.IsZero() {
			expiry = g.opts.Clock.NewTimer(next.Sub(g.opts.Clock.Now()))
			expired = expiry.C()
		}
		select {
		case <-ctx.Done():
			g.stopAll()
			return nil
		case <-g.events:
		case <-expired:
		}
		if expiry != nil {
			expiry.Stop()
		}
		g.recheck(ctx)
	}
}

// NeedLeaderElection is false: every replica of the operator gates its own
// reconciles.
func (g *Gate) NeedLeaderElection() bool { return false }

// Hold is the fence of domain d now, as the Gate last saw it change.
func (g *Gate) Hold(ctx context.Context, d string) Hold {
	g.mu.Lock()
	h, known := g.last[d]
	g.mu.Unlock()
	if !known {
		// A domain without a Fence yet: look, and follow it from now on.
		h = g.read(ctx, d)
		g.update(h)
	}
	return g.expired(h)
}

// expired is h, or the unknown state once h's hold has ended.
func (g *Gate) expired(h Hold) Hold {
	if !h.Holding || g.opts.Clock.Now().Before(h.Until) {
		return h
	}
	return Hold{Domain: h.Domain, Reason: fencegatev1alpha1.ReasonFenceUnknown, Message: fmt.Sprintf(
		"the hold of fence domain %s with token %d ended at %s and no fencegate replica in namespace %s renewed it: "+
			"fencegate may be down or cut off from the fence authority, so the fence may have moved",
		h.Domain, h.Token, h.Until.UTC().Format(time.RFC3339Nano), g.opts.Namespace)}
}

// read is the fence of domain d in the caches now.
func (g *Gate) read(ctx context.Context, d string) Hold {
	h := Hold{Domain: d}
	if d == "" {
		h.Reason = fencegatev1alpha1.ReasonFenceUnknown
		h.Message = fmt.Sprintf("the object names no fence domain (no %s label on it or its namespace) and fencegate's default domain is not known here: "+
			"set gate.Options.Domain (or %s) to fencegate's --domain; without them the Gate takes the only Fence's name, and this cluster has none or several", domain.Label, DomainEnv)
		return h
	}
	var f fencegatev1alpha1.Fence
	switch err := g.fences.Get(ctx, client.ObjectKey{Name: d}, &f); {
	case apierrors.IsNotFound(err):
		h.Reason = fencegatev1alpha1.ReasonFenceUnknown
		h.Message = fmt.Sprintf("this cluster has no Fence %s: fencegate does not serve fence domain %s here, or has not started", d, d)
		return h
	case err != nil:
		h.Reason = fencegatev1alpha1.ReasonFenceUnknown
		h.Message = fmt.Sprintf("the Fence %s cannot be read: %v", d, err)
		return h
	}
	holding := meta.FindStatusCondition(f.Status.Conditions, fencegatev1alpha1.ConditionHolding)
	if f.Status.State != "active" || holding == nil || holding.Status != "True" {
		h.Reason, h.Message = fencegatev1alpha1.ReasonFenceUnknown, fmt.Sprintf("the Fence %s says %q", d, f.Status.State)
		if holding != nil && holding.Status != "True" {
			h.Reason, h.Message = holding.Reason, holding.Message
		}
		return h
	}
	until := g.liveUntil(ctx, d, f.Status.Token)
	if !g.opts.Clock.Now().Before(until) {
		h.Reason = fencegatev1alpha1.ReasonFenceUnknown
		h.Message = fmt.Sprintf("the Fence %s says this cluster holds the fence with token %d, but no fencegate replica in namespace %s proves a live hold of it: "+
			"fencegate may be down or cut off from the fence authority, so the fence may have moved", d, f.Status.Token, g.opts.Namespace)
		return h
	}
	h.Holding, h.Token, h.Until = true, f.Status.Token, until
	if f.Status.Cluster != nil {
		h.Epoch = f.Status.Cluster.Epoch
	}
	return h
}

// liveUntil is the latest end of a hold of token that a replica's Lease of
// domain d publishes, as holdEnd judges it; zero for none.
func (g *Gate) liveUntil(ctx context.Context, d string, token int64) time.Time {
	var leases coordinationv1.LeaseList
	if err := g.leases.List(ctx, &leases, client.InNamespace(g.opts.Namespace), client.MatchingLabels{membership.LabelDomain: d}); err != nil {
		return time.Time{}
	}
	var until time.Time
	for i := range leases.Items {
		l := &leases.Items[i]
		h, ok := membership.HoldOf(l)
		if !ok || h.Token != token || l.Spec.RenewTime == nil {
			continue
		}
		// renewTime is stored to the microsecond, cut, not rounded: the
		// renewal may have been up to a microsecond later.
		renewed := l.Spec.RenewTime.Add(time.Microsecond)
		if end := holdEnd(h.ValidUntil, renewed, g.observed.at(l), g.opts.ClockSkew); end.After(until) {
			until = end
		}
	}
	return until
}

// holdEnd is when the Gate stops believing a hold that a replica published
// to last until validUntil, in a Lease write it dated renewed (both on the
// replica's wall clock), which this process first saw at observed (on its
// own clock, monotonic where the clock gives it): the earlier of
//   - validUntil less skew: this process's clock against the replica's,
//     late if this process's clock is behind by more than skew;
//   - observed plus the time the hold had left when the replica wrote it
//     (validUntil less renewed, which no difference of clocks changes),
//     less skew: late if the Lease took longer than skew to get here
//     (a watch that lagged, a cache that listed an old Lease).
//
// It is late only when both are, so neither a clock that is off nor a
// slow watch alone lets the Gate act past the replica's validity.
func holdEnd(validUntil, renewed, observed time.Time, skew time.Duration) time.Time {
	wall := validUntil.Add(-skew)
	counted := observed.Add(validUntil.Sub(renewed) - skew)
	if counted.Before(wall) {
		return counted
	}
	return wall
}

// HoldOf is the fence of obj's domain now, found as fencegate's webhook
// finds it: obj's fencegate.dev/domain label, else its namespace's, else
// Options.Domain.
func (g *Gate) HoldOf(ctx context.Context, obj client.Object) (Hold, error) {
	d, err := g.DomainOf(ctx, obj.GetNamespace(), obj.GetLabels()[domain.Label])
	if err != nil {
		return Hold{}, err
	}
	return g.Hold(ctx, d), nil
}

// DomainOf is the domain of an object in namespace with the given
// fencegate.dev/domain label ("" for none).
// It is "" when neither names one and fencegate's default domain is not
// known (Options.Domain): the Gate then holds nothing for the object.
func (g *Gate) DomainOf(ctx context.Context, namespace, label string) (string, error) {
	g.mu.Lock()
	def := g.defaultDomain
	g.mu.Unlock()
	d, err := domain.Resolver{Default: def, Namespaces: g.namespaces}.Of(ctx, namespace, label)
	if err != nil {
		return "", fmt.Errorf("gate: %w", err)
	}
	return d, nil
}

// recheck computes every domain's hold and tells those that changed.
func (g *Gate) recheck(ctx context.Context) {
	var fences fencegatev1alpha1.FenceList
	if err := g.fences.List(ctx, &fences); err != nil {
		g.log.Error(err, "list the Fences")
		return
	}
	g.mu.Lock()
	domains := make([]string, 0, len(fences.Items)+len(g.last))
	for _, f := range fences.Items {
		domains = append(domains, f.Name)
	}
	g.inferDefault(domains)
	for d := range g.last {
		domains = append(domains, d)
	}
	g.mu.Unlock()
	slices.Sort(domains)
	for _, d := range slices.Compact(domains) {
		g.update(g.read(ctx, d))
	}
}

// inferDefault takes the default domain from the Fences, named fences,
// when Options.Domain does not give it: the only Fence's name, else none.
// g.mu is held.
func (g *Gate) inferDefault(fences []string) {
	if g.opts.Domain != "" {
		return
	}
	def := ""
	if len(fences) == 1 {
		def = fences[0]
	}
	if def != g.defaultDomain {
		g.log.Info("default fence domain inferred from the Fences", "domain", def, "fences", fences,
			"hint", "set gate.Options.Domain or "+DomainEnv+" to fencegate's --domain so that nothing is inferred")
	}
	g.defaultDomain = def
}

// update records domain h.Domain's hold; a change cancels what was decided
// under the old one and re-enqueues the domain's objects.
func (g *Gate) update(h Hold) {
	g.mu.Lock()
	old, known := g.last[h.Domain]
	g.last[h.Domain] = h
	changed := !known || !old.same(h)
	var cancelled, renewed []*holdContext
	for hc := range g.inflight[h.Domain] {
		if hc.hold.same(h) {
			renewed = append(renewed, hc)
		} else {
			cancelled = append(cancelled, hc)
		}
	}
	watchers := slices.Clone(g.watchers)
	g.mu.Unlock()
	now := g.opts.Clock.Now()
	for _, hc := range renewed {
		hc.extend(h.Until, now)
	}
	for _, hc := range cancelled {
		hc.cancel(fencedError(h))
	}
	if !changed {
		return
	}
	if known {
		g.log.Info("fence transition", "domain", h.Domain, "holding", h.Holding, "token", h.Token, "reason", h.Reason)
	}
	for _, w := range watchers {
		w(h.Domain)
	}
}

// nextEnd is the earliest end of a hold now held; zero for none.
func (g *Gate) nextEnd() time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	var next time.Time
	for _, h := range g.last {
		if h.Holding && (next.IsZero() || h.Until.Before(next)) {
			next = h.Until
		}
	}
	return next
}

// stopAll cancels every hold in flight: the Gate no longer watches.
func (g *Gate) stopAll() {
	g.mu.Lock()
	var all []*holdContext
	for _, set := range g.inflight {
		for hc := range set {
			all = append(all, hc)
		}
	}
	g.mu.Unlock()
	for _, hc := range all {
		hc.cancel(errors.New("gate: stopped"))
	}
}

// waitSynced waits until the Gate has read the caches once.
func (g *Gate) waitSynced(ctx context.Context) error {
	select {
	case <-g.synced:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// onTransition calls f with the domain of every transition from now on.
func (g *Gate) onTransition(f func(domain string)) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.watchers = append(g.watchers, f)
}
