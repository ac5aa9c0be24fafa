package gate_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/gate"
)

// TestRESTConfigGatesAnSDKsWrites: a clientset made from RESTConfig (as an
// SDK such as Helm's makes its own) writes under its reconcile's hold only:
// outside a gated reconcile, and once the hold ended, its writes fail with
// ErrFenced; a LocalOnly teardown's pass; reads always do.
func TestRESTConfigGatesAnSDKsWrites(t *testing.T) {
	type attempt struct {
		create, read error
	}
	// write makes a clientset from RESTConfig under ctx and tries a write
	// and a read with it.
	write := func(ctx context.Context, l *lab, name string) attempt {
		cs, err := kubernetes.NewForConfig(gate.RESTConfig(ctx, l.cp.Config))
		if err != nil {
			t.Fatal(err)
		}
		_, create := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		_, read := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
		return attempt{create: create, read: read}
	}
	var during []attempt
	var l *lab
	inner := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		during = append(during, write(ctx, l, req.Name))
		return reconcile.Result{}, nil
	})
	var r reconcile.Reconciler
	l = newLab(t, func(l *lab) { r = l.gate.Reconciler(&fencegatev1alpha1.Component{}, inner) })

	if got := write(l.ctx, l, "outside"); !errors.Is(got.create, gate.ErrFenced) || got.read != nil {
		t.Errorf("outside a gated reconcile: create %v, read %v; want ErrFenced and a read", got.create, got.read)
	}

	l.fence("default", "active", 42)
	l.lease("default", "a", 42, l.clock.Now().Add(time.Hour))
	l.await("default", holding(42), "held")
	if _, err := r.Reconcile(l.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "held"}}); err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || during[0].create != nil || during[0].read != nil {
		t.Fatalf("under a live hold: %+v, want a write and a read", during)
	}

	// A reconcile's config outlives its hold: once the fence moved, its
	// writes fail, its reads pass.
	var kept context.Context
	keep := reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
		kept = ctx
		<-ctx.Done()
		return reconcile.Result{}, nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := l.gate.Reconciler(&fencegatev1alpha1.Component{}, keep).Reconcile(l.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: "kept"}})
		done <- err
	}()
	l.fence("default", "fenced", 43)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(gate.RESTConfig(kept, l.cp.Config))
	if err != nil {
		t.Fatal(err)
	}
	_, create := cs.CoreV1().ConfigMaps("default").Create(l.ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "late"}}, metav1.CreateOptions{})
	if !errors.Is(create, gate.ErrFenced) {
		t.Errorf("a write after the hold ended: %v, want ErrFenced", create)
	}

	// On a fenced cluster, a deletion is handed to the reconciler
	// LocalOnly: its teardown writes pass.
	gone := component("gone", "default")
	gone.Finalizers = []string{"example.dev/teardown"}
	if err := l.cp.Client.Create(l.ctx, gone); err != nil {
		t.Fatal(err)
	}
	if err := l.cp.Client.Delete(l.ctx, gone); err != nil {
		t.Fatal(err)
	}
	l.await("default", notHolding(fencegatev1alpha1.ReasonClusterFenced), "fenced")
	during = nil
	if err := waitReconciled(l, r, "gone", func() bool { return len(during) > 0 }); err != nil {
		t.Fatal(err)
	}
	if during[0].create != nil {
		t.Errorf("a LocalOnly teardown's write: %v, want it to pass", during[0].create)
	}
}

// waitReconciled reconciles default/name through r until done says the
// reconciler ran: the manager's cache sees the deletion a moment after it.
func waitReconciled(l *lab, r reconcile.Reconciler, name string, done func() bool) error {
	deadline := time.Now().Add(20 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			return errors.New("the reconciler was never handed " + name)
		}
		if _, err := r.Reconcile(l.ctx, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "default", Name: name}}); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
