package hold

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/marks"
	"github.com/fencegate/fencegate/internal/notify"
)

// DefaultQuietFor is how long an object's actuator must report nothing
// running before the object counts as quiet.
const DefaultQuietFor = 10 * time.Second

// DefaultMaxConcurrentReconciles is how many objects of each kind are
// decided and patched at once by default.
const DefaultMaxConcurrentReconciles = 4

// resolveInterval is how often kinds the API server does not serve are
// looked up again (their CRD may be installed later).
const resolveInterval = 30 * time.Second

// Policy answers the hold controller's questions; the policy engine
// implements it.
type Policy interface {
	// DomainOf returns the fence domain of an object in namespace whose
	// domain.Label is label ("" for none).
	DomainOf(ctx context.Context, namespace, label string) (string, error)
	// Hold evaluates data.fencegate.hold.decision for an object of domain.
	Hold(ctx context.Context, domain string, obj map[string]any) (engine.HoldDecision, error)
}

// Options configure the hold controller.
type Options struct {
	// Kinds are the resources to hold, as group resources
	// (cronjobs.batch, kustomizations.kustomize.toolkit.fluxcd.io).
	Kinds []schema.GroupResource
	// Policy decides; the policy engine in production.
	Policy Policy
	// Fences are the fence states the policies decide from, one per
	// served domain; each change of one re-decides that domain's objects.
	Fences map[string]fencestate.Source
	// QuietFor is how long an object's actuator must report nothing
	// running before it counts as quiet (DefaultQuietFor when 0).
	QuietFor time.Duration
	// MaxConcurrentReconciles bounds each kind's parallel decisions and
	// patches (DefaultMaxConcurrentReconciles when 0).
	MaxConcurrentReconciles int
	// Registerer takes the metrics; nil leaves them unregistered.
	Registerer prometheus.Registerer
	// Clock is injected by tests; nil means the real clock.
	Clock clock.PassiveClock
}

// ParseKinds reads kinds as resource.group names (cronjobs.batch); a
// core resource has no group (configmaps).
func ParseKinds(names []string) ([]schema.GroupResource, error) {
	kinds := make([]schema.GroupResource, 0, len(names))
	for _, n := range names {
		gr := schema.ParseGroupResource(strings.TrimSpace(n))
		if gr.Resource == "" || strings.ContainsAny(gr.Resource, "/ ") || gr.Resource != strings.ToLower(gr.Resource) {
			return nil, fmt.Errorf("%q is not a resource.group name: want the plural resource and its API group, as kubectl names them (cronjobs.batch)", n)
		}
		if slices.Contains(kinds, gr) {
			return nil, fmt.Errorf("%q is named twice", n)
		}
		kinds = append(kinds, gr)
	}
	return kinds, nil
}

// Holder holds and releases the configured kinds' objects, and counts them
// per domain.
type Holder struct {
	opts    Options
	mgr     manager.Manager
	reader  client.Reader
	client  client.Client
	metrics *metrics

	// domains place objects in their domains and read those domains'
	// fence states.
	domains marks.Domains

	mu sync.Mutex
	// unserved are the configured kinds not resolved to a served kind;
	// resolved is set once every kind was looked up once.
	unserved []schema.GroupResource
	resolved bool
	// kinds are the resolved kinds' names, gvks their kinds by name, and
	// marks their objects' marks by name.
	kinds []string
	gvks  map[string]schema.GroupVersionKind
	marks map[string]*marks.Kind[mark]
	// changes signal each domain's progress changes.
	changes map[string]chan struct{}
	// quietSince is when each held object was first seen quiet.
	quietSince sync.Map // objectKey → time.Time
}

// objectKey names an object of a kind.
type objectKey struct {
	kind string
	name types.NamespacedName
}

// SetupWithManager adds the hold controller to mgr. Each configured kind
// gets a controller of its own once the API server serves it; until then
// it is looked up again every 30 s. Everything runs on the leader.
func SetupWithManager(mgr manager.Manager, opts Options) (*Holder, error) {
	if opts.Policy == nil || len(opts.Fences) == 0 {
		return nil, errors.New("hold controller needs a policy to ask and the fence states it decides from")
	}
	if opts.QuietFor <= 0 {
		opts.QuietFor = DefaultQuietFor
	}
	if opts.MaxConcurrentReconciles <= 0 {
		opts.MaxConcurrentReconciles = DefaultMaxConcurrentReconciles
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	h := &Holder{
		opts: opts, mgr: mgr, reader: mgr.GetCache(), client: mgr.GetClient(), metrics: m,
		domains:  marks.Domains{Fences: opts.Fences, DomainOf: opts.Policy.DomainOf},
		unserved: slices.Clone(opts.Kinds),
		marks:    map[string]*marks.Kind[mark]{},
		gvks:     map[string]schema.GroupVersionKind{},
		changes:  map[string]chan struct{}{},
	}
	for d := range opts.Fences {
		h.changes[d] = notify.New()
	}
	if len(opts.Kinds) == 0 {
		return h, nil
	}
	if err := mgr.Add(manager.RunnableFunc(h.resolve)); err != nil {
		return nil, fmt.Errorf("add the hold controller: %w", err)
	}
	return h, nil
}

// Changes signals (coalescing) each change of domain d's Progress; nil
// for a domain not served.
func (h *Holder) Changes(d string) <-chan struct{} { return h.changes[d] }

// Progress returns where the holding of domain d's objects stands (no
// kinds for a domain not served).
func (h *Holder) Progress(d string) Progress {
	h.mu.Lock()
	trackers := make(map[string]*marks.Tracker[mark], len(h.kinds))
	for _, k := range h.kinds {
		if t := h.marks[k].Tracker(d); t != nil {
			trackers[k] = t
		}
	}
	p := Progress{Resolved: h.resolved}
	for _, gr := range h.unserved {
		p.Unserved = append(p.Unserved, gr.String())
	}
	h.mu.Unlock()
	for k, t := range trackers {
		p.Kinds = append(p.Kinds, kindProgress(k, t))
	}
	sortKinds(p.Kinds)
	return p
}
