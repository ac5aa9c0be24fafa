package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fencestate"
)

// BenchmarkReMark1000 measures how long the controller takes, on a real API
// server, to re-mark 1,000 Components after a fence transition: from the
// change signal until every Component's status shows the new state.
func BenchmarkReMark1000(b *testing.B) {
	const n = 1000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	h := start(b, fenced)

	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			return h.cp.Client.Create(gctx, &fencegatev1alpha1.Component{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("comp-%04d", i), Namespace: "default"},
				Spec:       fencegatev1alpha1.ComponentSpec{Enabled: true},
			})
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	h.waitAll(b, ctx, "held", isHeld)

	states := []fencestate.State{active, fenced}
	checks := []func(*fencegatev1alpha1.Component) bool{isFree, isHeld}
	for i := 0; b.Loop(); i++ {
		h.transition(states[i%2])
		h.waitAll(b, ctx, string(states[i%2].Status), checks[i%2])
	}
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N), "s/remark")
}
