package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/notify"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/testrun"
)

// switchablePolicy answers like the shipped policies would for a given fence
// state, is the fencestate.Source of that state, and lets the test change
// it.
type switchablePolicy struct {
	notify.Broadcast
	mu    sync.Mutex
	state fencestate.State
}

// set changes the state and signals it, as the agent does.
func (p *switchablePolicy) set(s fencestate.State) {
	p.mu.Lock()
	p.state = s
	p.mu.Unlock()
	p.Signal()
}

func (p *switchablePolicy) Fence() (fencestate.State, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state, true
}

func (p *switchablePolicy) Reconcile(context.Context, string, map[string]any) (engine.ReconcileDecision, error) {
	s, _ := p.Fence()
	if s.Status == fencestate.Active {
		return engine.ReconcileDecision{Reason: fencegatev1alpha1.ReasonFenceHeld, Message: "this cluster holds the fence"}, nil
	}
	return engine.ReconcileDecision{Hold: true, Reason: fencegatev1alpha1.ReasonClusterFenced, Message: fmt.Sprintf("%s holds the fence", s.Holder.Name)}, nil
}

var (
	active = fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Name: "east", Epoch: 7}, Holder: fencestate.Cluster{Name: "east", Epoch: 7}, Token: 10}
	fenced = fencestate.State{Status: fencestate.Fenced, Cluster: fencestate.Cluster{Name: "east", Epoch: 7}, Holder: fencestate.Cluster{Name: "west", Epoch: 8}, Token: 11}
)

// eventBurst is the Event budget of the controllers under test.
const eventBurst = 5

// domainPolicies are the policies of each domain, answering for the
// domain they are asked about.
type domainPolicies map[string]*switchablePolicy

// DomainOf is the object's label, else the default domain: namespaces
// name none here.
func (domainPolicies) DomainOf(_ context.Context, _, label string) (string, error) {
	if label != "" {
		return label, nil
	}
	return "default", nil
}

func (p domainPolicies) Reconcile(ctx context.Context, d string, component map[string]any) (engine.ReconcileDecision, error) {
	return p[d].Reconcile(ctx, d, component)
}

type harness struct {
	cp *cluster.ControlPlane
	// policy is the default domain's; policies every domain's.
	policy   *switchablePolicy
	policies domainPolicies
	registry *prometheus.Registry
	rec      *controller.Reconciler
	// cache is the running manager's.
	cache cache.Cache
}

// start starts a control plane and the controller on it, deciding as the
// shipped policies would for initial.
func start(t testing.TB, initial fencestate.State) *harness {
	t.Helper()
	h := newHarness(t, initial)
	h.run(t)
	return h
}

// newHarness starts a control plane; run starts the controller.
func newHarness(t testing.TB, initial fencestate.State) *harness {
	t.Helper()
	h := &harness{
		cp:       cluster.StartForTest(t, cluster.Options{Name: "controller"}),
		policy:   &switchablePolicy{state: initial},
		registry: prometheus.NewRegistry(),
	}
	h.policies = domainPolicies{"default": h.policy}
	return h
}

// run starts the controller; adjust, if given, changes the manager's
// client configuration and options first.
func (h *harness) run(t testing.TB, adjust ...func(*rest.Config, *ctrl.Options)) {
	t.Helper()
	cfg := rest.CopyConfig(h.cp.Config)
	opts := ctrl.Options{
		Logger:                 testr.NewWithInterface(t, testr.Options{}),
		Scheme:                 h.cp.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		// The cache trims Components and Namespaces as fencegate run's does.
		Cache: cache.Options{ByObject: controller.CacheByObject()},
		// Each test runs a manager of its own with the one controller.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	for _, a := range adjust {
		a(cfg, &opts)
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if h.rec, err = controller.SetupWithManager(mgr, controller.Options{
		Policy: h.policies, Fences: h.fences(), Registerer: h.registry,
		// A budget of a few Events that never refills within the test.
		EventBurst: eventBurst, EventsPerSecond: 1e-6,
	}); err != nil {
		t.Fatal(err)
	}
	h.cache = mgr.GetCache()
	testrun.Start(t, context.Background(), "manager", mgr.Start)
}

// fences are every domain's fence states.
func (h *harness) fences() map[string]fencestate.Source {
	out := map[string]fencestate.Source{}
	for d, p := range h.policies {
		out[d] = p
	}
	return out
}

// transition changes the fence and signals it, as the agent does.
func (h *harness) transition(s fencestate.State) { h.policy.set(s) }

func (h *harness) createComponents(t *testing.T, ctx context.Context, n int) {
	t.Helper()
	for i := range n {
		comp := &fencegatev1alpha1.Component{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("comp-%03d", i), Namespace: "default"},
			Spec:       fencegatev1alpha1.ComponentSpec{Enabled: true, Chart: fencegatev1alpha1.ChartRef{Name: "app", Version: "1.0.0"}},
		}
		if err := h.cp.Client.Create(ctx, comp); err != nil {
			t.Fatalf("create %s: %v", comp.Name, err)
		}
	}
}

// waitAll waits until every Component satisfies ok.
func (h *harness) waitAll(t testing.TB, ctx context.Context, what string, ok func(*fencegatev1alpha1.Component) bool) *fencegatev1alpha1.ComponentList {
	t.Helper()
	var list fencegatev1alpha1.ComponentList
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := h.cp.Client.List(ctx, &list); err != nil {
			return false, err
		}
		for i := range list.Items {
			if !ok(&list.Items[i]) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting until every component is %s: %v", what, err)
	}
	return &list
}

func sourceConflict(c *fencegatev1alpha1.Component) *metav1.Condition {
	return meta.FindStatusCondition(c.Status.Conditions, fencegatev1alpha1.ConditionSourceConflict)
}

func isHeld(c *fencegatev1alpha1.Component) bool {
	sc := sourceConflict(c)
	stalled := meta.FindStatusCondition(c.Status.Conditions, fencegatev1alpha1.ConditionStalled)
	return sc != nil && sc.Status == metav1.ConditionTrue && sc.Reason == fencegatev1alpha1.ReasonClusterFenced &&
		meta.IsStatusConditionFalse(c.Status.Conditions, fencegatev1alpha1.ConditionReady) &&
		stalled != nil && stalled.Status == metav1.ConditionTrue &&
		c.Status.Fence != nil && c.Status.Fence.State == "fenced" && c.Status.Fence.Holder == "west@8" &&
		c.Status.ObservedGeneration == c.Generation
}

func isFree(c *fencegatev1alpha1.Component) bool {
	sc := sourceConflict(c)
	return sc != nil && sc.Status == metav1.ConditionFalse && sc.Reason == fencegatev1alpha1.ReasonFenceHeld &&
		meta.FindStatusCondition(c.Status.Conditions, fencegatev1alpha1.ConditionStalled) == nil &&
		meta.FindStatusCondition(c.Status.Conditions, fencegatev1alpha1.ConditionReady) == nil &&
		c.Status.Fence != nil && c.Status.Fence.State == "active" && c.Status.Fence.Holder == "east@7" &&
		c.Status.ObservedGeneration == c.Generation
}

func TestFenceTransitionsReMarkEveryComponent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := start(t, fenced)
	const n = 25
	h.createComponents(t, ctx, n)

	list := h.waitAll(t, ctx, "held", isHeld)
	if got := gauge(t, h.registry, "fencegate_components_held"); got != n {
		t.Errorf("fencegate_components_held = %v, want %d", got, n)
	}

	t.Run("events are recorded within a budget shared by all components", func(t *testing.T) {
		// The API server records events of its own in the namespace (of
		// the kubernetes Service, say): only the Components' count.
		var events eventsv1.EventList
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var all eventsv1.EventList
			if err := h.cp.Client.List(ctx, &all, client.InNamespace("default")); err != nil {
				return false, err
			}
			events.Items = slices.DeleteFunc(all.Items, func(e eventsv1.Event) bool { return e.Regarding.Kind != "Component" })
			return len(events.Items) >= eventBurst, nil
		})
		if err != nil {
			t.Fatalf("waiting for %d events: %v", eventBurst, err)
		}
		for _, e := range events.Items {
			if e.Reason != fencegatev1alpha1.ReasonClusterFenced || e.Regarding.Kind != "Component" || e.Type != "Warning" {
				t.Errorf("event %s: reason %q type %q regarding %s, want a ClusterFenced warning on a Component", e.Name, e.Reason, e.Type, e.Regarding.Kind)
			}
		}
		if len(events.Items) != eventBurst {
			t.Errorf("%d events recorded for %d components, want the budget of %d", len(events.Items), n, eventBurst)
		}
		if got := counter(t, h.registry, "fencegate_controller_events_dropped_total"); got != n-eventBurst {
			t.Errorf("fencegate_controller_events_dropped_total = %v, want %d", got, n-eventBurst)
		}
	})

	t.Run("no writes while nothing changes", func(t *testing.T) {
		versions := map[string]string{}
		for _, c := range list.Items {
			versions[c.Name] = c.ResourceVersion
		}
		// Each signal re-enqueues every Component; wait until all of those
		// reconciles ran, then check that none of them wrote: no new
		// resourceVersion, and no write request at all (an apply that
		// changes nothing would keep the resourceVersion too).
		writes := writeRequests(t)
		before := reconciles(t)
		for range 3 {
			h.transition(fenced)
			waitReconciles(t, ctx, before+n)
			before = reconciles(t)
		}
		var after fencegatev1alpha1.ComponentList
		if err := h.cp.Client.List(ctx, &after); err != nil {
			t.Fatal(err)
		}
		for _, c := range after.Items {
			if c.ResourceVersion != versions[c.Name] {
				t.Errorf("%s was written (resourceVersion %s → %s) although the fence did not change", c.Name, versions[c.Name], c.ResourceVersion)
			}
		}
		if got := writeRequests(t); got != writes {
			t.Errorf("%v write requests were sent although the fence did not change", got-writes)
		}
	})

	t.Run("fence regained: every component flips without a spec change", func(t *testing.T) {
		h.transition(active)
		list := h.waitAll(t, ctx, "free", isFree)
		for _, c := range list.Items {
			if c.Generation != 1 {
				t.Errorf("%s: generation %d, want 1 (no spec change)", c.Name, c.Generation)
			}
		}
		h.waitProgress(t, ctx, controller.MarkProgress{Started: true, Key: active.Key(), Total: n})
	})

	t.Run("spec changes while active keep the conditions consistent", func(t *testing.T) {
		var comp fencegatev1alpha1.Component
		if err := h.cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "comp-000"}, &comp); err != nil {
			t.Fatal(err)
		}
		comp.Spec.Chart.Version = "1.1.0"
		if err := h.cp.Client.Update(ctx, &comp); err != nil {
			t.Fatal(err)
		}
		h.waitAll(t, ctx, "free at the new generation", func(c *fencegatev1alpha1.Component) bool {
			return isFree(c) && (c.Name != "comp-000" || c.Status.ObservedGeneration == 2)
		})
	})

	t.Run("deleted components leave the held count", func(t *testing.T) {
		h.transition(fenced)
		h.waitAll(t, ctx, "held", isHeld)
		comp := &fencegatev1alpha1.Component{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "comp-001"}}
		if err := h.cp.Client.Delete(ctx, comp); err != nil {
			t.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			err := h.cp.Client.Get(ctx, client.ObjectKeyFromObject(comp), comp)
			return apierrors.IsNotFound(err) && gauge(t, h.registry, "fencegate_components_held") == n-1, nil
		})
		if err != nil {
			t.Fatalf("held count after delete: %v (gauge %v)", err, gauge(t, h.registry, "fencegate_components_held"))
		}
		h.waitProgress(t, ctx, controller.MarkProgress{Started: true, Key: fenced.Key(), Held: n - 1, Total: n - 1})
	})
}

// waitProgress waits until the controller's marks say want: every Component
// marked for the state the harness switched to, and the counts.
func (h *harness) waitProgress(t *testing.T, ctx context.Context, want controller.MarkProgress) {
	t.Helper()
	var got controller.MarkProgress
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = h.rec.Marks("default").Progress()
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("marks: %+v, want %+v", got, want)
	}
}
