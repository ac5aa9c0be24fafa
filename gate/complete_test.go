package gate_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/gate"
)

// unnamed is a builder whose controller's name need not be unique in the
// process: every lab builds one.
func unnamed(mgr ctrl.Manager) *builder.Builder {
	return ctrl.NewControllerManagedBy(mgr).WithOptions(controller.Options{SkipNameValidation: ptr.To(true)})
}

// TestCompleteWiresTheGate: one Complete call, which names the object
// once, gives a controller the three parts of the gate: while its cluster
// is fenced the reconciler is not called and the object is marked
// SourceConflict (Reconciler); the transition to holding reconciles it at
// once, not at the requeue a minute later (Source); the reconciler's
// writes of the reconciled kind and of AlsoGate's kinds assert the hold's
// token (Client). A builder that already has a For is refused.
func TestCompleteWiresTheGate(t *testing.T) {
	var mu sync.Mutex
	var calls []string
	called := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), calls...)
	}
	newReconciler := func(c client.Client) reconcile.Reconciler {
		return funcReconciler(func(ctx context.Context, req reconcile.Request) error {
			mu.Lock()
			calls = append(calls, req.Name)
			mu.Unlock()
			w := &Widget{}
			if err := c.Get(ctx, req.NamespacedName, w); err != nil {
				return client.IgnoreNotFound(err)
			}
			made := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: req.Namespace, Name: req.Name + "-made"}}
			if err := c.Create(ctx, made); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			before := w.DeepCopyObject().(*Widget)
			w.Labels = map[string]string{"acted": "true"}
			return c.Patch(ctx, w, client.MergeFrom(before))
		})
	}
	var twice error
	l := newLab(t, func(l *lab) {
		if err := l.gate.Complete(unnamed(l.mgr), &Widget{}, newReconciler, gate.AlsoGate(&corev1.ConfigMap{})); err != nil {
			t.Fatal(err)
		}
		twice = l.gate.Complete(unnamed(l.mgr).For(&fencegatev1alpha1.Component{}), &Widget{}, newReconciler)
	})
	if twice == nil {
		t.Error("Complete of a builder that has a For: no error, want the builder's")
	}
	l.fence("default", "fenced", 43)
	l.await("default", notHolding(fencegatev1alpha1.ReasonClusterFenced), "fenced")
	gizmo := widget("default", "gizmo", "")
	if err := l.cp.Client.Create(l.ctx, gizmo); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(gizmo), gizmo); err != nil {
			return false, err
		}
		return meta.IsStatusConditionTrue(gizmo.Status.Conditions, fencegatev1alpha1.ConditionSourceConflict), nil
	}); err != nil {
		t.Fatalf("the fenced widget was never marked SourceConflict: %v; conditions %+v", err, gizmo.Status.Conditions)
	}
	if got := called(); len(got) != 0 {
		t.Errorf("reconciler called %v on a fenced cluster", got)
	}

	// The transition: only the Gate's Source enqueues the widget before
	// its requeue, a minute away.
	l.fence("default", "active", 44)
	l.lease("default", "a", 44, l.clock.Now().Add(time.Hour))
	made := &corev1.ConfigMap{}
	if err := wait.PollUntilContextTimeout(l.ctx, 10*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := l.cp.Client.Get(ctx, client.ObjectKeyFromObject(gizmo), gizmo); err != nil {
			return false, err
		}
		err := l.cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "gizmo-made"}, made)
		return err == nil && gizmo.Labels["acted"] == "true", client.IgnoreNotFound(err)
	}); err != nil {
		t.Fatalf("the widget was not reconciled once its cluster held the fence: %v; reconciler called %v", err, called())
	}
	if got := gizmo.Annotations[gate.WriteTokenAnnotation]; got != "44" {
		t.Errorf("the reconciler's patch of the widget asserted token %q, want 44", got)
	}
	if got := made.Annotations[gate.WriteTokenAnnotation]; got != "44" {
		t.Errorf("the reconciler's create of an AlsoGate kind asserted token %q, want 44", got)
	}
}
