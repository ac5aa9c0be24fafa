package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
)

// BenchmarkReMark measures, on a real API server, how fast the controller
// re-marks n Components after a fence transition (from the change signal
// until every Component's status says the new state), beside a bare client
// that makes the same status server-side applies to n Components of its
// own, on the same API server, in the same run: the controller's field
// manager and patch bodies, as many requests at once as the controller has
// workers, and neither with a client-side limit (fencegate runs with
// --kube-api-qps=-1 beside the chart's FlowSchema). It reports both in
// objects/s and the controller's as a ratio to the bare client's, and fails
// if the controller wrote a Component more than once a transition. The
// sizes are 1,000, 3,000 and 10,000 Components; -short re-marks 100.
func BenchmarkReMark(b *testing.B) {
	sizes := []int{1000, 3000, 10000}
	if testing.Short() {
		sizes = []int{reMarkShort}
	}
	for _, n := range sizes {
		b.Run(fmt.Sprintf("components=%d", n), func(b *testing.B) {
			r := startReMark(b, n)
			for b.Loop() {
				r.round(b)
			}
			r.report(b)
		})
	}
}

// reMarkShort is BenchmarkReMark's -short size, which TestReMark runs.
const reMarkShort = 100

// TestReMark runs BenchmarkReMark's comparison at its -short size, so that
// its code path stays tested, and checks that a transition writes only the
// Components whose status it changes.
func TestReMark(t *testing.T) {
	r := startReMark(t, reMarkShort)
	t.Run("a transition writes only the Components whose status changes", r.writesOnlyWhatChanged)
	t.Run("the controller and the bare client re-mark every Component", func(t *testing.T) {
		for range 2 {
			r.round(t)
		}
		r.report(t)
	})
}

// bareNamespace holds the bare client's Components, out of the
// controller's cache: the controller neither sees nor answers its writes.
const bareNamespace = "bare"

// reMark is the one set-up of BenchmarkReMark and TestReMark: n Components
// the controller marks, n others the bare client writes, all held.
type reMark struct {
	ctx context.Context
	h   *harness
	n   int
	// state is the fence state every Component is marked for.
	state fencestate.State
	// bare is a client with no client-side limit; bareComps are its
	// Components as it last wrote them; workers is how many requests it
	// sends at once, the controller's worker count.
	bare      client.Client
	bareComps []*fencegatev1alpha1.Component
	workers   int
	// rounds, controllerTime and bareTime add up the rounds' re-marks;
	// writesBefore is statusWrites before the first round.
	rounds                   int
	controllerTime, bareTime time.Duration
	writesBefore             float64
}

// startReMark creates n Components for the controller and n for the bare
// client, starts the controller with no client-side limit and a cache of
// its namespace only, and waits until every Component is held.
func startReMark(tb testing.TB, n int) *reMark {
	tb.Helper()
	ctx := tb.Context()
	h := newHarness(tb, fenced)
	noLimit := rest.CopyConfig(h.cp.Config)
	noLimit.QPS = -1
	bare, err := client.New(noLimit, client.Options{Scheme: h.cp.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	r := &reMark{ctx: ctx, h: h, n: n, state: fenced, bare: bare}
	if err := bare.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bareNamespace}}); err != nil {
		tb.Fatal(err)
	}
	r.bareComps = make([]*fencegatev1alpha1.Component, n)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range 2 * n {
		ns, name := "default", fmt.Sprintf("comp-%05d", i%n)
		if i >= n {
			ns = bareNamespace
		}
		g.Go(func() error {
			c := &fencegatev1alpha1.Component{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec:       fencegatev1alpha1.ComponentSpec{Enabled: true},
			}
			if i >= n {
				r.bareComps[i-n] = c
			}
			return bare.Create(gctx, c)
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
	h.run(tb, func(cfg *rest.Config, opts *ctrl.Options) {
		cfg.QPS = -1
		opts.Cache.DefaultNamespaces = map[string]cache.Config{"default": {}}
	})
	r.waitMarked(tb, fenced)
	r.workers = int(processMetric(tb, "controller_runtime_max_concurrent_reconciles", "controller", "component"))
	if r.workers == 0 {
		tb.Fatal(`no controller_runtime_max_concurrent_reconciles{controller="component"}`)
	}
	if r.workers < 1 {
		tb.Fatalf("the controller has %d workers", r.workers)
	}
	r.bareApply(tb, fenced, r.bareComps)
	r.waitQuiet(tb)
	r.writesBefore = statusWrites(tb, ctx, h.cp.Config)
	return r
}

// round re-marks every Component for the other fence state: the
// controller's after a transition, then the bare client's.
func (r *reMark) round(tb testing.TB) {
	tb.Helper()
	to := active
	if r.state.Status == fencestate.Active {
		to = fenced
	}
	reconciled := reconciles(tb)
	start := time.Now()
	r.h.transition(to)
	r.waitMarked(tb, to)
	r.controllerTime += time.Since(start)
	// Each of its writes comes back to the controller as an event: let
	// those reconciles end before the bare client starts.
	waitReconciles(tb, r.ctx, reconciled+float64(2*r.n))

	start = time.Now()
	r.bareApply(tb, to, r.bareComps)
	r.bareTime += time.Since(start)
	r.state = to
	r.rounds++
}

// report checks every Component's status and that the controller wrote
// each once a round, and reports the re-marking rates.
func (r *reMark) report(tb testing.TB) {
	tb.Helper()
	r.wantAll(tb, r.state)
	writes := statusWrites(tb, r.ctx, r.h.cp.Config) - r.writesBefore
	controllerWrites := (writes - float64(r.rounds*r.n)) / float64(r.rounds*r.n)
	if controllerWrites != 1 {
		tb.Errorf("the controller wrote %v status(es) a Component a transition, want 1 (%v writes in %d rounds of %d Components)", controllerWrites, writes, r.rounds, r.n)
	}
	objects := float64(r.rounds * r.n)
	ctrlRate, bareRate := objects/r.controllerTime.Seconds(), objects/r.bareTime.Seconds()
	tb.Logf("%d Components, %d rounds, %d workers: controller %.0f objects/s, bare client %.0f objects/s, ratio %.2f",
		r.n, r.rounds, r.workers, ctrlRate, bareRate, ctrlRate/bareRate)
	if b, ok := tb.(*testing.B); ok {
		b.ReportMetric(ctrlRate, "objects/s")
		b.ReportMetric(bareRate, "bare-objects/s")
		b.ReportMetric(ctrlRate/bareRate, "ratio")
		b.ReportMetric(r.controllerTime.Seconds()/float64(r.rounds), "s/remark")
	}
}

// writesOnlyWhatChanged: half of the Components already say the next
// state (as an earlier leader left them) when the transition is signalled;
// the controller writes only the other half.
func (r *reMark) writesOnlyWhatChanged(t *testing.T) {
	to := active
	if r.state.Status == fencestate.Active {
		to = fenced
	}
	var list fencegatev1alpha1.ComponentList
	if err := r.bare.List(r.ctx, &list, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	var half []*fencegatev1alpha1.Component
	for i := range list.Items {
		if i%2 == 0 {
			half = append(half, &list.Items[i])
		}
	}
	// The controller decides for the new state before it is told of it,
	// so that the writes of the half it sees are right already.
	reconciled := reconciles(t)
	r.h.policy.mu.Lock()
	r.h.policy.state = to
	r.h.policy.mu.Unlock()
	r.bareApply(t, to, half)
	waitReconciles(t, r.ctx, reconciled+float64(len(half)))

	writes := statusWrites(t, r.ctx, r.h.cp.Config)
	reconciled = reconciles(t)
	r.h.policy.Signal()
	r.waitMarked(t, to)
	waitReconciles(t, r.ctx, reconciled+float64(r.n+r.n-len(half)))
	if got, want := statusWrites(t, r.ctx, r.h.cp.Config)-writes, float64(r.n-len(half)); got != want {
		t.Errorf("the transition wrote %v statuses, want %v: only the Components not marked already", got, want)
	}
	// The bare client's Components follow, for the rounds.
	r.bareApply(t, to, r.bareComps)
	r.state = to
	r.wantAll(t, to)
	// The rounds' accounting starts over from here.
	r.writesBefore = statusWrites(t, r.ctx, r.h.cp.Config)
}

// bareApply applies to comps the status the controller would for the
// state s, r.workers at a time, and keeps what it wrote in comps.
func (r *reMark) bareApply(tb testing.TB, s fencestate.State, comps []*fencegatev1alpha1.Component) {
	tb.Helper()
	decision := decide(s)
	g, ctx := errgroup.WithContext(r.ctx)
	g.SetLimit(max(r.workers, 1))
	for _, c := range comps {
		g.Go(func() error {
			desired := controller.Desired(c, decision, s, time.Now())
			status, err := controller.ApplyStatus(c, desired, decision.Hold)
			if err != nil {
				return err
			}
			if err := r.bare.Status().Apply(ctx, status, client.FieldOwner(controller.FieldManager), client.ForceOwnership); err != nil {
				return err
			}
			c.Status = desired
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatalf("bare client: %v", err)
	}
}

// decide is what the harness's policy decides in the state s.
func decide(s fencestate.State) engine.ReconcileDecision {
	d, _ := (&switchablePolicy{state: s}).Reconcile(context.Background(), "default", nil)
	return d
}

// waitMarked waits until the controller's marks say that every one of its
// Components is marked for s.
func (r *reMark) waitMarked(tb testing.TB, s fencestate.State) {
	tb.Helper()
	held := 0
	if s.Status != fencestate.Active {
		held = r.n
	}
	want := controller.MarkProgress{Started: true, Key: s.Key(), Held: held, Total: r.n}
	var got controller.MarkProgress
	err := wait.PollUntilContextTimeout(r.ctx, 5*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		got = r.h.rec.Marks("default").Progress()
		return got == want, nil
	})
	if err != nil {
		tb.Fatalf("marks %+v, want %+v: %v", got, want, err)
	}
}

// waitQuiet waits until the controller has gone a second without a
// reconcile.
func (r *reMark) waitQuiet(tb testing.TB) {
	tb.Helper()
	last, since := reconciles(tb), time.Now()
	err := wait.PollUntilContextTimeout(r.ctx, 100*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		if now := reconciles(tb); now != last {
			last, since = now, time.Now()
		}
		return time.Since(since) >= time.Second, nil
	})
	if err != nil {
		tb.Fatalf("the controller never went quiet: %v", err)
	}
}

// wantAll checks that every Component, the controller's and the bare
// client's, says the state s.
func (r *reMark) wantAll(tb testing.TB, s fencestate.State) {
	tb.Helper()
	ok := isHeld
	if s.Status == fencestate.Active {
		ok = isFree
	}
	var list fencegatev1alpha1.ComponentList
	if err := r.bare.List(r.ctx, &list); err != nil {
		tb.Fatal(err)
	}
	if len(list.Items) != 2*r.n {
		tb.Fatalf("%d Components, want %d", len(list.Items), 2*r.n)
	}
	for i := range list.Items {
		if c := &list.Items[i]; !ok(c) {
			tb.Fatalf("%s/%s does not say %s: %+v", c.Namespace, c.Name, s.Status, c.Status)
		}
	}
}

// statusWrites is how many writes of a Component's status the API server
// has answered, by its apiserver_request_total.
func statusWrites(tb testing.TB, ctx context.Context, cfg *rest.Config) float64 {
	tb.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	raw, err := cs.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		tb.Fatalf("the API server's metrics: %v", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		tb.Fatalf("parse the API server's metrics: %v", err)
	}
	var total float64
	for _, m := range families["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		switch labels["verb"] {
		case "GET", "LIST", "WATCH", "WATCHLIST":
			continue
		}
		if labels["resource"] == "components" && labels["subresource"] == "status" {
			total += m.GetCounter().GetValue()
		}
	}
	return total
}
