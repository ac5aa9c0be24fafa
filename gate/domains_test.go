package gate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/gate"
)

// funcReconciler runs its function as a reconcile.
type funcReconciler func(ctx context.Context, req reconcile.Request) error

func (f funcReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return reconcile.Result{}, f(ctx, req)
}

// underReconcile runs a gated reconcile of Widget default/name, of the
// lab's domain default.
func underReconcile(l *lab, r reconcile.Reconciler, name string) error {
	_, err := r.Reconcile(l.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}})
	return err
}

// blockingCreates makes the creates of objects named block wait for their
// context to end, and return its cause: a write in flight.
type blockingCreates struct {
	client.Client
	block string
	// entered is told when a blocked create begins.
	entered chan struct{}
}

func (b *blockingCreates) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if obj.GetName() == b.block {
		b.entered <- struct{}{}
		<-ctx.Done()
		return context.Cause(ctx)
	}
	return b.Client.Create(ctx, obj, opts...)
}

// widget is Widget ns/name with the domain label given ("" for none).
func widget(ns, name, label string) *Widget {
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if label != "" {
		w.Labels = map[string]string{domain.Label: label}
	}
	return w
}

// TestClientJudgesTheWrittenObjectsDomain: a reconcile of an object in
// domain default, which this cluster holds, writes objects of other
// domains (namespace shop is domain payments; an object may name payments
// in its own label). Each write is judged by the written object's domain:
// while the other cluster holds payments, every write into it is refused,
// deletes of objects the cache no longer has included; once this cluster
// holds payments too, a write into it asserts payments' token, not the
// reconcile's, and is cancelled in flight when payments' hold ends while
// the reconcile's own goes on.
func TestClientJudgesTheWrittenObjectsDomain(t *testing.T) {
	var r reconcile.Reconciler
	var do func(ctx context.Context) error
	l := newLab(t, func(l *lab) {
		r = l.gate.Reconciler(&Widget{}, funcReconciler(func(ctx context.Context, _ reconcile.Request) error { return do(ctx) }))
	})
	blocking := &blockingCreates{Client: l.cp.Client, block: "in-flight", entered: make(chan struct{}, 1)}
	c, err := l.gate.Client(blocking, &Widget{})
	if err != nil {
		t.Fatal(err)
	}
	l.fence("default", "active", 42)
	l.lease("default", "a", 42, l.clock.Now().Add(time.Hour))
	l.fence("payments", "fenced", 60)
	l.await("default", holding(42), "held")
	l.await("payments", notHolding(fencegatev1alpha1.ReasonClusterFenced), "fenced")

	// Objects to write, seeded past the gate.
	seeded := map[string]*Widget{
		"in-shop":     widget("shop", "in-shop", ""),
		"labelled":    widget("default", "labelled", "payments"),
		"own":         widget("default", "own", ""),
		"shop-status": widget("shop", "shop-status", ""),
	}
	for _, w := range seeded {
		if err := l.cp.Client.Create(l.ctx, w.DeepCopyObject().(*Widget)); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(ns, name string) *Widget {
		t.Helper()
		w := &Widget{}
		if err := l.cp.Client.Get(l.ctx, client.ObjectKey{Namespace: ns, Name: name}, w); err != nil {
			t.Fatal(err)
		}
		return w
	}
	labelled := func(w *Widget, value string) *Widget {
		w = w.DeepCopyObject().(*Widget)
		if w.Labels == nil {
			w.Labels = map[string]string{}
		}
		w.Labels[writtenLabel] = value
		return w
	}
	type write struct {
		name string
		// ns/object is the object written; its domain is payments but for
		// "own".
		ns, object string
		do         func(ctx context.Context) error
		// stamps says whether the write asserts a token in the object.
		stamps bool
	}
	writes := []write{
		{name: "create in shop", ns: "shop", object: "created", stamps: true, do: func(ctx context.Context) error {
			return c.Create(ctx, widget("shop", "created", ""))
		}},
		{name: "create labelled payments in default", ns: "default", object: "created-labelled", stamps: true, do: func(ctx context.Context) error {
			return c.Create(ctx, widget("default", "created-labelled", "payments"))
		}},
		{name: "update in shop", ns: "shop", object: "in-shop", stamps: true, do: func(ctx context.Context) error {
			return c.Update(ctx, labelled(stored("shop", "in-shop"), "update"))
		}},
		{name: "patch of an object labelled payments", ns: "default", object: "labelled", stamps: true, do: func(ctx context.Context) error {
			w := stored("default", "labelled")
			return c.Patch(ctx, labelled(w, "patch"), client.MergeFrom(w))
		}},
		{name: "server-side apply in shop", ns: "shop", object: "in-shop", stamps: true, do: func(ctx context.Context) error {
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(widgetVersion.WithKind("Widget"))
			u.SetNamespace("shop")
			u.SetName("in-shop")
			u.SetLabels(map[string]string{writtenLabel: "apply"})
			return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("lab"), client.ForceOwnership)
		}},
		{name: "status update in shop", ns: "shop", object: "shop-status", do: func(ctx context.Context) error {
			return c.Status().Update(ctx, stored("shop", "shop-status"))
		}},
	}
	deletes := []write{
		// Objects the reconcile names without reading them (gone from its
		// cache, say): judged by the label the request carries, else by
		// the namespace.
		{name: "delete by label", ns: "default", object: "labelled", do: func(ctx context.Context) error {
			return c.Delete(ctx, widget("default", "labelled", "payments"))
		}},
		{name: "delete in shop", ns: "shop", object: "in-shop", do: func(ctx context.Context) error {
			return c.Delete(ctx, widget("shop", "in-shop", ""))
		}},
	}

	// The other cluster holds payments: every write into it is refused,
	// under a reconcile that holds default.
	for _, w := range append(append([]write{}, writes...), deletes...) {
		var got error
		do = func(ctx context.Context) error { got = w.do(ctx); return nil }
		if err := underReconcile(l, r, "own"); err != nil {
			t.Fatal(err)
		}
		var fenced *gate.FencedError
		if !errors.As(got, &fenced) || !errors.Is(got, gate.ErrFenced) || fenced.Hold.Domain != "payments" || fenced.Hold.Reason != fencegatev1alpha1.ReasonClusterFenced {
			t.Errorf("%s while the other cluster holds payments: %v, want ErrFenced for domain payments", w.name, got)
		}
	}
	// A write into the reconcile's own domain passes, asserting its token.
	do = func(ctx context.Context) error { return c.Update(ctx, labelled(stored("default", "own"), "own")) }
	if err := underReconcile(l, r, "own"); err != nil {
		t.Fatalf("a write into the reconcile's own domain: %v", err)
	}
	if got := stored("default", "own").Annotations[gate.WriteTokenAnnotation]; got != "42" {
		t.Errorf("a write into domain default asserted token %q, want 42", got)
	}

	// This cluster holds payments too, under token 60: a write into it
	// asserts 60, not the reconcile's 42.
	l.fence("payments", "active", 60)
	l.lease("payments", "a", 60, l.clock.Now().Add(time.Hour))
	l.await("payments", holding(60), "held")
	for _, w := range writes {
		do = func(ctx context.Context) error { return w.do(ctx) }
		if err := underReconcile(l, r, "own"); err != nil {
			t.Errorf("%s while holding payments: %v", w.name, err)
			continue
		}
		if got := stored(w.ns, w.object).Annotations[gate.WriteTokenAnnotation]; w.stamps && got != "60" {
			t.Errorf("%s asserted token %q, want payments' 60", w.name, got)
		}
	}
	for _, w := range deletes {
		do = func(ctx context.Context) error { return w.do(ctx) }
		if err := underReconcile(l, r, "own"); err != nil {
			t.Errorf("%s while holding payments: %v", w.name, err)
		}
	}

	// A write into payments in flight ends when payments' hold does; the
	// reconcile's own hold of default goes on.
	ended := make(chan [2]error, 1)
	do = func(ctx context.Context) error {
		err := c.Create(ctx, widget("shop", "in-flight", ""))
		ended <- [2]error{err, context.Cause(ctx)}
		return nil
	}
	go func() { _ = underReconcile(l, r, "own") }()
	select {
	case <-blocking.entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the write into payments never left the gate")
	}
	l.fence("payments", "fenced", 61)
	select {
	case got := <-ended:
		if !errors.Is(got[0], gate.ErrFenced) || !strings.Contains(got[0].Error(), "payments") {
			t.Errorf("the write in flight into payments ended with %v, want ErrFenced for payments", got[0])
		}
		if got[1] != nil {
			t.Errorf("the reconcile of domain default was cancelled with %v; only the write into payments ends", got[1])
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the write in flight into payments was not cancelled when payments' hold ended")
	}
}

// TestReconcilerJudgesAGoneObjectByItsOwnLabel: an object deleted from
// namespace default (domain default, held here) whose own label names
// payments (held by the other cluster) is reconciled LocalOnly, by its own
// domain, not its namespace's.
func TestReconcilerJudgesAGoneObjectByItsOwnLabel(t *testing.T) {
	inner := &countingReconciler{}
	var r reconcile.Reconciler
	l := newLab(t, func(l *lab) { r = l.gate.Reconciler(&Widget{}, inner) })
	l.fence("default", "active", 42)
	l.lease("default", "a", 42, l.clock.Now().Add(time.Hour))
	l.fence("payments", "fenced", 60)
	l.await("default", holding(42), "held")
	w := widget("default", "labelled", "payments")
	if err := l.cp.Client.Create(l.ctx, w); err != nil {
		t.Fatal(err)
	}
	inCache := func(want bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			err := l.mgr.GetClient().Get(ctx, client.ObjectKeyFromObject(w), &Widget{})
			return (err == nil) == want, nil
		}); err != nil {
			t.Fatalf("the cache never had the widget: %v", want)
		}
	}
	inCache(true)
	if err := l.cp.Client.Delete(l.ctx, w); err != nil {
		t.Fatal(err)
	}
	inCache(false)
	// The Gate's delete handler runs beside the controller's: a reconcile
	// that comes before it judges by the namespace. Retry until it ran.
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)}
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		if _, err := r.Reconcile(ctx, req); err != nil {
			return false, err
		}
		calls := inner.called()
		return calls[len(calls)-1].localOnly, nil
	}); err != nil {
		calls := append([]call{{}}, inner.called()...)
		t.Errorf("the gone widget labelled payments was reconciled %d times, last %+v; want LocalOnly (payments is the other cluster's)", len(calls)-1, calls[len(calls)-1])
	}
	// An object never seen is judged by its namespace: default, held.
	inner.mu.Lock()
	inner.calls = nil
	inner.mu.Unlock()
	if _, err := r.Reconcile(l.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "never"}}); err != nil {
		t.Fatal(err)
	}
	if got := inner.called(); len(got) != 1 || got[0].localOnly {
		t.Errorf("a gone object of namespace default: %+v, want reconciled under default's hold", got)
	}
}

// TestSkewedClocksDoNotStretchAHold: a replica whose clock is an hour
// ahead of the Gate's publishes a hold with 9 s left. The Gate counts those
// 9 s (less the second of skew) from when it saw the Lease, not to the
// replica's wall-clock end, and cancels the work in flight then.
func TestSkewedClocksDoNotStretchAHold(t *testing.T) {
	inner := &countingReconciler{block: true, ended: make(chan error, 1)}
	var r reconcile.Reconciler
	l := newLab(t, func(l *lab) { r = l.gate.Reconciler(&fencegatev1alpha1.Component{}, inner) })
	l.fence("default", "active", 42)
	replica := l.clock.Now().Add(time.Hour)
	l.leaseRenewed("default", "a", 42, replica, replica.Add(9*time.Second))
	h := l.await("default", holding(42), "held")
	if want := l.clock.Now().Add(8 * time.Second); h.Until.After(want) {
		t.Errorf("the hold ends at %v, want at most %v: 9 s left less the second of skew, on the Gate's clock", h.Until, want)
	}
	go func() {
		_, _ = r.Reconcile(l.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "billing"}})
	}()
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return len(inner.called()) == 1, nil
	}); err != nil {
		t.Fatal("the reconciler was never called")
	}
	l.clock.Step(8*time.Second + time.Millisecond)
	select {
	case cause := <-inner.ended:
		if !errors.Is(cause, gate.ErrFenced) {
			t.Errorf("the reconcile ended with %v, want ErrFenced", cause)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the reconcile ran on past the replica's validity: the Gate believed the replica's wall clock")
	}
	l.await("default", notHolding(fencegatev1alpha1.ReasonFenceUnknown), "unknown past the hold's end")
}

// gauge is fencegate_gate_unfenced_kinds{kind} in reg; -1 without it.
func gauge(t *testing.T, reg *prometheus.Registry, kind string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fencegate_gate_unfenced_kinds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "kind" && lp.GetValue() == kind {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	return -1
}

// TestDefaultDomainAndUnfencedKinds: without Options.Domain (nor
// FENCEGATE_DOMAIN), objects that name no domain are decided by the only
// Fence's domain, and refused while there is none or several. The gated
// kinds that no fencegate webhook fences are reported, and stop being
// once one does.
func TestDefaultDomainAndUnfencedKinds(t *testing.T) {
	t.Setenv(gate.DomainEnv, "")
	reg := prometheus.NewRegistry()
	l := newLab(t, nil, func(o *gate.Options) {
		o.Domain, o.Registerer, o.WebhookCheck = "", reg, time.Minute
	})
	c, err := l.gate.Client(l.cp.Client, &Widget{}, &fencegatev1alpha1.Component{})
	if err != nil {
		t.Fatal(err)
	}
	create := func(name string) error { return c.Create(l.ctx, widget("default", name, "")) }
	if !l.mgr.GetCache().WaitForCacheSync(l.ctx) {
		t.Fatal("the manager's cache never synced")
	}
	// No Fence: the default domain is not known.
	var fenced *gate.FencedError
	if err := create("no-fence"); !errors.As(err, &fenced) || fenced.Hold.Reason != fencegatev1alpha1.ReasonFenceUnknown || !strings.Contains(err.Error(), "Options.Domain") {
		t.Errorf("a write of an object naming no domain, with no Fence: %v; want ErrFenced saying to set Options.Domain", err)
	}
	// One Fence, payments: fencegate's default domain.
	l.fence("payments", "active", 70)
	l.lease("payments", "a", 70, l.clock.Now().Add(time.Hour))
	l.await("payments", holding(70), "held")
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return create("one-fence") == nil, nil
	}); err != nil {
		t.Fatal("an object naming no domain was never written under the only Fence's domain")
	}
	w := &Widget{}
	if err := l.cp.Client.Get(l.ctx, client.ObjectKey{Namespace: "default", Name: "one-fence"}, w); err != nil {
		t.Fatal(err)
	}
	if got := w.Annotations[gate.WriteTokenAnnotation]; got != "70" {
		t.Errorf("the write asserted token %q, want payments' 70", got)
	}
	// Several Fences: which is the default cannot be told.
	l.fence("default", "active", 71)
	l.lease("default", "a", 71, l.clock.Now().Add(time.Hour))
	l.await("default", holding(71), "held")
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		err := create("several")
		return errors.As(err, &fenced) && fenced.Hold.Reason == fencegatev1alpha1.ReasonFenceUnknown, nil
	}); err != nil {
		t.Error("an object naming no domain was still written with two Fences")
	}

	// No webhook configuration: both gated kinds are reported.
	awaitGauge := func(kind string, want float64) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
			return gauge(t, reg, kind) == want, nil
		}); err != nil {
			t.Errorf("fencegate_gate_unfenced_kinds{kind=%q} = %v, want %v", kind, gauge(t, reg, kind), want)
		}
	}
	awaitGauge("Widget.gate.example.dev", 1)
	awaitGauge("Component.components.fencegate.dev", 1)
	// fencegate's webhooks for Components (their selector matches no
	// object, so that the lab's writes never call them).
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"components.fencegate.dev"}, APIVersions: []string{"*"}, Resources: []string{"components"}},
	}}
	never := &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matched"}}
	cfg := admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://127.0.0.1:1/validate")}
	none := admissionregistrationv1.SideEffectClassNone
	ignore := admissionregistrationv1.Ignore
	if err := l.cp.Client.Create(l.ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fencegate"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{Name: "validate.fencegate.dev", ClientConfig: cfg, Rules: rules, ObjectSelector: never,
			SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}}}}); err != nil {
		t.Fatal(err)
	}
	l.clock.Step(time.Minute)
	// A validating webhook alone does not fence: the mutating one removes
	// the assertion.
	awaitGauge("Component.components.fencegate.dev", 1)
	if err := l.cp.Client.Create(l.ctx, &admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "fencegate"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{Name: "mutate.fencegate.dev", ClientConfig: cfg, Rules: rules, ObjectSelector: never,
			SideEffects: &none, FailurePolicy: &ignore, AdmissionReviewVersions: []string{"v1"}}}}); err != nil {
		t.Fatal(err)
	}
	// The next check, a minute on.
	if err := wait.PollUntilContextTimeout(l.ctx, 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		l.clock.Step(time.Minute)
		return gauge(t, reg, "Component.components.fencegate.dev") == 0, nil
	}); err != nil {
		t.Errorf("Components are fenced by fencegate's webhooks, yet reported unfenced")
	}
	awaitGauge("Widget.gate.example.dev", 1)
}
