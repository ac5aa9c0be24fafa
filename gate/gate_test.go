package gate_test

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/gate"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/testrun"
)

const namespace = "fencegate"

// lab is a real API server, a manager with a Gate on a fake clock, and
// what fencegate would write: the Fences and the replicas' Leases.
type lab struct {
	t     testing.TB
	ctx   context.Context
	cp    *cluster.ControlPlane
	clock *clocktesting.FakeClock
	gate  *gate.Gate
	mgr   ctrl.Manager
}

// newLab starts a lab; options, if given, change the Gate's Options (the
// lab's are domain default, namespace fencegate, its fake clock and a
// minute's requeue).
func newLab(t testing.TB, register func(*lab), options ...func(*gate.Options)) *lab {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	root, err := cluster.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cp := cluster.StartForTest(t, cluster.Options{Name: "gate", CRDs: []string{filepath.Join(root, "config", "crd"), filepath.Join("testdata", "widgets.yaml")}})
	addWidgets(cp.Scheme)
	l := &lab{t: t, ctx: ctx, cp: cp, clock: clocktesting.NewFakeClock(time.Now())}
	for _, ns := range []string{namespace, "shop"} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}
		if ns == "shop" {
			obj.Labels = map[string]string{domain.Label: "payments"}
		}
		if err := cp.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	mgr, err := ctrl.NewManager(cp.Config, ctrl.Options{
		Scheme: cp.Scheme, Logger: testr.NewWithInterface(t, testr.Options{}), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	l.mgr = mgr
	opts := gate.Options{Domain: "default", Namespace: namespace, Clock: l.clock, Requeue: time.Minute}
	for _, o := range options {
		o(&opts)
	}
	if l.gate, err = gate.New(mgr, opts); err != nil {
		t.Fatal(err)
	}
	if register != nil {
		register(l)
	}
	testrun.Start(t, ctx, "manager", mgr.Start)
	return l
}

// fence writes domain d's Fence as fencegate would: state, token, and the
// Holding condition.
func (l *lab) fence(d, state string, token int64) {
	l.t.Helper()
	holding := metav1.Condition{Type: fencegatev1alpha1.ConditionHolding, Status: metav1.ConditionTrue, Reason: fencegatev1alpha1.ReasonFenceHeld, Message: "this cluster holds the fence"}
	if state != "active" {
		holding.Status, holding.Reason, holding.Message = metav1.ConditionFalse, fencegatev1alpha1.ReasonClusterFenced, `cluster "west" holds the fence at epoch 8`
	}
	l.fenceHolding(d, state, token, holding)
}

// fenceHolding writes domain d's Fence with state, token and the Holding
// condition given.
func (l *lab) fenceHolding(d, state string, token int64, holding metav1.Condition) {
	l.t.Helper()
	f := &fencegatev1alpha1.Fence{}
	err := l.cp.Client.Get(l.ctx, client.ObjectKey{Name: d}, f)
	if apierrors.IsNotFound(err) {
		f = &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: d}}
		err = l.cp.Client.Create(l.ctx, f)
	}
	if err != nil {
		l.t.Fatal(err)
	}
	f.Status.State, f.Status.Token = state, token
	f.Status.Cluster = &fencegatev1alpha1.FenceCluster{Name: "east", Epoch: 7}
	meta.SetStatusCondition(&f.Status.Conditions, holding)
	if err := l.cp.Client.Status().Update(l.ctx, f); err != nil {
		l.t.Fatal(err)
	}
}

// lease writes replica instance's Lease of domain d with a hold of token
// until validUntil (token 0: no hold), renewed now: a replica whose clock
// agrees with the Gate's.
func (l *lab) lease(d, instance string, token int64, validUntil time.Time) {
	l.t.Helper()
	l.leaseRenewed(d, instance, token, l.clock.Now(), validUntil)
}

// leaseRenewed writes replica instance's Lease of domain d as a replica
// whose clock read renewed when it wrote it: a hold of token until
// validUntil on that clock (token 0: no hold).
func (l *lab) leaseRenewed(d, instance string, token int64, renewed, validUntil time.Time) {
	l.t.Helper()
	key := client.ObjectKey{Namespace: namespace, Name: "fencegate-" + d + "-" + instance}
	lease := &coordinationv1.Lease{}
	err := l.cp.Client.Get(l.ctx, key, lease)
	create := apierrors.IsNotFound(err)
	if create {
		lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, Labels: map[string]string{membership.LabelDomain: d}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(instance)}}
	} else if err != nil {
		l.t.Fatal(err)
	}
	lease.Annotations = nil
	lease.Spec.RenewTime = &metav1.MicroTime{Time: renewed}
	if token != 0 {
		lease.Annotations = map[string]string{
			membership.AnnotationHoldToken: strconv.FormatInt(token, 10), membership.AnnotationHoldValidUntil: validUntil.UTC().Format(time.RFC3339Nano),
		}
	}
	if create {
		err = l.cp.Client.Create(l.ctx, lease)
	} else {
		err = l.cp.Client.Update(l.ctx, lease)
	}
	if err != nil {
		l.t.Fatal(err)
	}
}

// await waits until the Gate sees domain d as want says.
func (l *lab) await(d string, want func(gate.Hold) bool, what string) gate.Hold {
	l.t.Helper()
	var h gate.Hold
	err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		h = l.gate.Hold(ctx, d)
		return want(h), nil
	})
	if err != nil {
		l.t.Fatalf("domain %s never %s; last %+v", d, what, h)
	}
	return h
}

func holding(token int64) func(gate.Hold) bool {
	return func(h gate.Hold) bool { return h.Holding && h.Token == token }
}

func notHolding(reason string) func(gate.Hold) bool {
	return func(h gate.Hold) bool { return !h.Holding && h.Reason == reason }
}

// TestHoldNeedsALiveHold: the Gate believes a Holding Fence only while a
// replica's Lease publishes a hold of its token, and only until that hold
// ends (less the clock skew); else the state is unknown.
func TestHoldNeedsALiveHold(t *testing.T) {
	l := newLab(t, nil)
	now := l.clock.Now()
	steps := []struct {
		name  string
		do    func()
		want  func(gate.Hold) bool
		until time.Time
	}{
		{"no Fence: unknown", func() {}, notHolding(fencegatev1alpha1.ReasonFenceUnknown), time.Time{}},
		{"a Holding Fence and no Lease: unknown", func() { l.fence("default", "active", 42) }, notHolding(fencegatev1alpha1.ReasonFenceUnknown), time.Time{}},
		{"a Lease of another token: unknown", func() { l.lease("default", "a", 41, now.Add(9*time.Second)) }, notHolding(fencegatev1alpha1.ReasonFenceUnknown), time.Time{}},
		{"a Lease of the token: holding", func() { l.lease("default", "b", 42, now.Add(9*time.Second)) }, holding(42), now.Add(8 * time.Second)},
		{"past the hold's end less the skew: unknown", func() { l.clock.Step(8*time.Second + time.Millisecond) }, notHolding(fencegatev1alpha1.ReasonFenceUnknown), time.Time{}},
		{"a renewal: holding again", func() { l.lease("default", "b", 42, l.clock.Now().Add(9*time.Second)) }, holding(42), time.Time{}},
		{"fenced: the Fence's reason", func() { l.fence("default", "fenced", 43) }, notHolding(fencegatev1alpha1.ReasonClusterFenced), time.Time{}},
	}
	for _, step := range steps {
		step.do()
		h := l.await("default", step.want, step.name)
		// The Gate counts the time left from the Lease's renewTime, which
		// is stored to the microsecond: its end may come that much sooner.
		if !step.until.IsZero() && (h.Until.After(step.until) || h.Until.Before(step.until.Add(-time.Microsecond))) {
			t.Errorf("%s: the hold ends at %v, want %v (the published end less a second of skew), or up to a microsecond sooner", step.name, h.Until, step.until)
		}
	}
	// Another domain's hold is its own.
	l.await("payments", notHolding(fencegatev1alpha1.ReasonFenceUnknown), "unknown without a Fence")
}

// countingReconciler records the reconciles it is given.
type countingReconciler struct {
	mu    sync.Mutex
	calls []call
	// block, if set, makes Reconcile wait for its context to end.
	block bool
	ended chan error
}

type call struct {
	name      string
	localOnly bool
}

func (r *countingReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	r.mu.Lock()
	r.calls = append(r.calls, call{req.Name, gate.LocalOnly(ctx)})
	r.mu.Unlock()
	if r.block {
		<-ctx.Done()
		r.ended <- context.Cause(ctx)
	}
	return reconcile.Result{}, nil
}

func (r *countingReconciler) called() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func component(name, ns string) *fencegatev1alpha1.Component {
	return &fencegatev1alpha1.Component{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
}

// TestReconcilerHoldsBackAFencedCluster: while the cluster does not hold
// the fence of an object's domain, the reconciler is not called, the
// object says why in SourceConflict (unless fencegate's controller does:
// a Component) and is requeued without penalty; a
// deletion is handed over flagged LocalOnly; once it holds, the reconciler
// runs.
func TestReconcilerHoldsBackAFencedCluster(t *testing.T) {
	inner := &countingReconciler{}
	var r, widgets reconcile.Reconciler
	l := newLab(t, func(l *lab) {
		r = l.gate.Reconciler(&fencegatev1alpha1.Component{}, inner)
		widgets = l.gate.Reconciler(&Widget{}, &countingReconciler{})
	})
	l.fence("default", "fenced", 43)
	l.fence("payments", "active", 50)
	l.lease("payments", "a", 50, l.clock.Now().Add(time.Hour))
	l.await("payments", holding(50), "held")
	l.await("default", notHolding(fencegatev1alpha1.ReasonClusterFenced), "fenced")
	for _, c := range []*fencegatev1alpha1.Component{component("billing", "default"), component("cart", "shop")} {
		if err := l.cp.Client.Create(l.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// The manager's cache must hold them before the reconciler reads.
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var list fencegatev1alpha1.ComponentList
		return l.mgr.GetClient().List(ctx, &list) == nil && len(list.Items) == 2, nil
	}); err != nil {
		t.Fatal(err)
	}
	reconcileOne := func(ns, name string) reconcile.Result {
		t.Helper()
		res, err := r.Reconcile(l.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := reconcileOne("default", "billing"); res.RequeueAfter != time.Minute {
		t.Errorf("fenced reconcile result %+v, want a requeue after a minute", res)
	}
	if res := reconcileOne("shop", "cart"); res.RequeueAfter != 0 {
		t.Errorf("held reconcile result %+v, want the reconciler's", res)
	}
	if got := inner.called(); len(got) != 1 || got[0] != (call{"cart", false}) {
		t.Fatalf("reconciler called %+v, want cart alone (domain payments is held, default fenced)", got)
	}
	// fencegate's controller marks Components: the Gate leaves them be.
	var billing fencegatev1alpha1.Component
	if err := l.cp.Client.Get(l.ctx, client.ObjectKey{Namespace: "default", Name: "billing"}, &billing); err != nil {
		t.Fatal(err)
	}
	if len(billing.Status.Conditions) != 0 {
		t.Errorf("the Gate wrote a Component's conditions %+v; fencegate's controller marks Components", billing.Status.Conditions)
	}
	// An operator's own kind with conditions gets SourceConflict.
	gizmo := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "gizmo"}}
	if err := l.cp.Client.Create(l.ctx, gizmo); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := widgets.Reconcile(ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "gizmo"}}); err != nil {
			return false, err
		}
		if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(gizmo), gizmo); err != nil {
			return false, err
		}
		return len(gizmo.Status.Conditions) > 0, nil
	}); err != nil {
		t.Fatalf("the widget was never marked: %v", err)
	}
	c := meta.FindStatusCondition(gizmo.Status.Conditions, fencegatev1alpha1.ConditionSourceConflict)
	if c == nil || c.Status != metav1.ConditionTrue || c.Reason != fencegatev1alpha1.ReasonClusterFenced || c.Message != `cluster "west" holds the fence at epoch 8` {
		t.Errorf("SourceConflict = %+v, want True with the Fence's reason and message", c)
	}
	// A deleted object on the fenced cluster: the reconciler tears down
	// local state only.
	reconcileOne("default", "gone")
	if got := inner.called(); len(got) != 2 || got[1] != (call{"gone", true}) {
		t.Errorf("reconciler called %+v, want gone flagged LocalOnly", got)
	}
}

// TestTransitionCancelsTheWorkInFlight: a reconcile that runs when the
// cluster stops holding has its context cancelled with ErrFenced, its
// writes fail with it at once, and reads keep working.
func TestTransitionCancelsTheWorkInFlight(t *testing.T) {
	inner := &countingReconciler{block: true, ended: make(chan error, 1)}
	var r reconcile.Reconciler
	l := newLab(t, func(l *lab) { r = l.gate.Reconciler(&fencegatev1alpha1.Component{}, inner) })
	l.fence("default", "active", 42)
	l.lease("default", "a", 42, l.clock.Now().Add(time.Hour))
	l.await("default", holding(42), "held")
	go func() {
		_, _ = r.Reconcile(l.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "billing"}})
	}()
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(inner.called()) == 1, nil
	}); err != nil {
		t.Fatal("the reconciler was never called")
	}
	l.fence("default", "fenced", 43)
	select {
	case cause := <-inner.ended:
		if !errors.Is(cause, gate.ErrFenced) {
			t.Errorf("the reconcile ended with %v, want ErrFenced", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the reconcile in flight was not cancelled")
	}
}

// TestClientGatesWrites: a gated write asserts the token of the hold it is
// made under (no webhook here removes it, so the stored object shows it),
// fails with ErrFenced while the cluster does not hold the fence, and
// reads pass.
func TestClientGatesWrites(t *testing.T) {
	l := newLab(t, nil)
	c, err := l.gate.Client(l.cp.Client, &fencegatev1alpha1.Component{})
	if err != nil {
		t.Fatal(err)
	}
	l.fence("default", "active", 42)
	l.lease("default", "a", 42, l.clock.Now().Add(time.Hour))
	l.await("default", holding(42), "held")
	billing := component("billing", "default")
	if err := c.Create(l.ctx, billing); err != nil {
		t.Fatal(err)
	}
	var stored fencegatev1alpha1.Component
	if err := c.Get(l.ctx, client.ObjectKey{Namespace: "default", Name: "billing"}, &stored); err != nil {
		t.Fatal(err)
	}
	if got := stored.Annotations[gate.WriteTokenAnnotation]; got != "42" {
		t.Errorf("the create asserted token %q, want 42", got)
	}
	patched := stored.DeepCopy()
	patched.Labels = map[string]string{"team": "billing"}
	delete(patched.Annotations, gate.WriteTokenAnnotation)
	l.fence("default", "active", 44)
	l.lease("default", "a", 44, l.clock.Now().Add(time.Hour))
	l.await("default", holding(44), "held again")
	if err := c.Patch(l.ctx, patched, client.MergeFrom(&stored)); err != nil {
		t.Fatal(err)
	}
	if got := patched.Annotations[gate.WriteTokenAnnotation]; got != "44" {
		t.Errorf("the patch asserted token %q, want 44", got)
	}
	applied := appliedComponent("billing", "default")
	if err := c.Apply(l.ctx, client.ApplyConfigurationFromUnstructured(applied), client.FieldOwner("lab")); err != nil {
		t.Fatal(err)
	}
	if got := applied.GetAnnotations()[gate.WriteTokenAnnotation]; got != "44" {
		t.Errorf("the server-side apply asserted token %q, want 44", got)
	}

	l.fence("default", "fenced", 45)
	l.await("default", notHolding(fencegatev1alpha1.ReasonClusterFenced), "fenced")
	writes := map[string]func() error{
		"create": func() error { return c.Create(l.ctx, component("cart", "default")) },
		"update": func() error { return c.Update(l.ctx, patched) },
		"patch":  func() error { return c.Patch(l.ctx, patched, client.MergeFrom(&stored)) },
		"delete": func() error { return c.Delete(l.ctx, patched) },
		"status": func() error { return c.Status().Update(l.ctx, patched) },
		"apply": func() error {
			return c.Apply(l.ctx, client.ApplyConfigurationFromUnstructured(appliedComponent("billing", "default")), client.FieldOwner("lab"))
		},
		"status apply": func() error {
			return c.Status().Apply(l.ctx, client.ApplyConfigurationFromUnstructured(appliedComponent("billing", "default")), client.FieldOwner("lab"))
		},
	}
	for name, write := range writes {
		if err := write(); !errors.Is(err, gate.ErrFenced) {
			t.Errorf("%s while fenced: %v, want ErrFenced", name, err)
		}
	}
	if err := c.Get(l.ctx, client.ObjectKeyFromObject(patched), &stored); err != nil {
		t.Errorf("a read while fenced: %v", err)
	}
	// Other kinds pass.
	if err := c.Create(l.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "local"}}); err != nil {
		t.Errorf("a ConfigMap while fenced: %v", err)
	}
}

// appliedComponent is what a server-side apply of Component ns/name
// declares: a label of its own.
func appliedComponent(name, ns string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(fencegatev1alpha1.GroupVersion.String())
	u.SetKind("Component")
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetLabels(map[string]string{"applied": "true"})
	return u
}

// TestSourceReenqueuesTheDomainOnTransitions: each transition of a domain
// adds every object of that domain to the queue, and none of another.
func TestSourceReenqueuesTheDomainOnTransitions(t *testing.T) {
	l := newLab(t, nil)
	for _, c := range []*fencegatev1alpha1.Component{component("billing", "default"), component("ledger", "default"), component("cart", "shop")} {
		if err := l.cp.Client.Create(l.ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	l.fence("default", "fenced", 41)
	l.fence("payments", "fenced", 41)
	l.await("default", notHolding(fencegatev1alpha1.ReasonClusterFenced), "fenced")
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var list fencegatev1alpha1.ComponentList
		return l.mgr.GetClient().List(ctx, &list) == nil && len(list.Items) == 3, nil
	}); err != nil {
		t.Fatal(err)
	}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	if err := l.gate.Source(&fencegatev1alpha1.Component{}).Start(l.ctx, q); err != nil {
		t.Fatal(err)
	}
	l.fence("default", "active", 42)
	l.lease("default", "a", 42, l.clock.Now().Add(time.Hour))
	got := map[string]bool{}
	deadline := time.After(20 * time.Second)
	for len(got) < 2 {
		items := make(chan reconcile.Request, 1)
		go func() {
			item, shutdown := q.Get()
			if !shutdown {
				q.Done(item)
				items <- item
			}
		}()
		select {
		case item := <-items:
			got[item.Name] = true
		case <-deadline:
			t.Fatalf("re-enqueued %v, want billing and ledger", got)
		}
	}
	// Two transitions of domain default (fenced to unknown, the Lease
	// not written yet, then to holding) may each have enqueued its
	// objects; domain payments had none.
	time.Sleep(200 * time.Millisecond)
	for q.Len() > 0 {
		item, _ := q.Get()
		q.Done(item)
		got[item.Name] = true
	}
	if got["cart"] || len(got) != 2 {
		t.Errorf("re-enqueued %v, want billing and ledger alone (cart is in domain payments)", got)
	}
}
