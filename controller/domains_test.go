package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
)

// TestTransitionReMarksItsDomainOnly: on a real API server, with two
// domains held by different clusters, a transition of one re-marks that
// domain's Components and writes none of the other's; a Component moved to
// the other domain by its label is marked there, and no longer in the
// first.
func TestTransitionReMarksItsDomainOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := newHarness(t, active)
	payments := &switchablePolicy{state: fenced}
	h.policies["payments"] = payments
	h.run(t)

	const n = 4
	for i := range 2 * n {
		comp := &fencegatev1alpha1.Component{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("comp-%03d", i), Namespace: "default"},
			Spec:       fencegatev1alpha1.ComponentSpec{Enabled: true, Chart: fencegatev1alpha1.ChartRef{Name: "app", Version: "1.0.0"}},
		}
		if i >= n {
			comp.Labels = map[string]string{domain.Label: "payments"}
		}
		if err := h.cp.Client.Create(ctx, comp); err != nil {
			t.Fatal(err)
		}
	}
	inPayments := func(c *fencegatev1alpha1.Component) bool { return c.Labels[domain.Label] == "payments" }
	h.waitAll(t, ctx, "marked for its domain", func(c *fencegatev1alpha1.Component) bool {
		if inPayments(c) {
			return isHeld(c)
		}
		return isFree(c)
	})
	versions := map[string]string{}
	for _, c := range h.waitAll(t, ctx, "listed", func(*fencegatev1alpha1.Component) bool { return true }).Items {
		versions[c.Name] = c.ResourceVersion
	}

	payments.set(active)
	list := h.waitAll(t, ctx, "free in both domains", isFree)
	for _, c := range list.Items {
		if !inPayments(&c) && c.ResourceVersion != versions[c.Name] {
			t.Errorf("%s of the default domain was written by payments' transition", c.Name)
		}
	}
	// The marks are counted once each write returns, which may be after
	// the list above saw it.
	for d, want := range map[string]int{"default": n, "payments": n} {
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			p := h.rec.Marks(d).Progress()
			return p.Total == want && p.Pending == 0 && p.Held == 0, nil
		})
		if err != nil {
			t.Errorf("domain %s: marks %+v, want %d marked, none held", d, h.rec.Marks(d).Progress(), want)
		}
	}

	// comp-000 moves to payments, which becomes fenced again.
	payments.set(fenced)
	var moved fencegatev1alpha1.Component
	if err := h.cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "comp-000"}, &moved); err != nil {
		t.Fatal(err)
	}
	moved.Labels = map[string]string{domain.Label: "payments"}
	if err := h.cp.Client.Update(ctx, &moved); err != nil {
		t.Fatal(err)
	}
	h.waitAll(t, ctx, "marked for its domain after the move", func(c *fencegatev1alpha1.Component) bool {
		if inPayments(c) {
			return isHeld(c)
		}
		return isFree(c)
	})
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		def, pay := h.rec.Marks("default").Progress(), h.rec.Marks("payments").Progress()
		return def.Total == n-1 && pay.Total == n+1 && pay.Held == n+1 && pay.Pending == 0, nil
	})
	if err != nil {
		t.Errorf("marks after the move: default %+v, payments %+v; want %d and %d (all held)", h.rec.Marks("default").Progress(), h.rec.Marks("payments").Progress(), n-1, n+1)
	}
}
