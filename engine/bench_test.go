package engine_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
)

// BenchmarkWriteFence measures a fence write, which builds the snapshot the
// next decisions read: a heartbeat (only valid_until_ns moves, the residual
// and its remembered decisions are kept) and a transition (active and fenced
// alternate: partial evaluation and a compile of the residual each time).
// Writes never block decisions; this is the agent's cost.
func BenchmarkWriteFence(b *testing.B) {
	b.Run("heartbeat", func(b *testing.B) {
		e := newEngine(b, engine.Options{})
		state := enginetest.Fence(fencestate.Active, "east", 7, "east", 7)
		state.ValidUntilNS = 1 << 62
		b.ReportAllocs()
		for b.Loop() {
			state.ValidUntilNS++
			writeFence(b, e, state)
		}
	})
	b.Run("transition", func(b *testing.B) {
		alternateTransitions(b, newEngine(b, engine.Options{}))
	})
	b.Run("transition/chart-config", func(b *testing.B) {
		alternateTransitions(b, newEngine(b, engine.Options{ConfigFile: writeTemp(b, "config.json", chartConfig)}))
	})
}

// chartConfig is data.fencegate.config as the chart renders it by default:
// fencegate's own service account is the controller user.
const chartConfig = `{"controller_users": ["system:serviceaccount:fencegate-system:fencegate"]}`

// BenchmarkAdmitUndecided measures an admission decision that nothing
// remembered answers: every request comes from a user not seen before, which
// the policies read under the chart's config. It is the residual's
// evaluation, the cost of each new kind of request.
func BenchmarkAdmitUndecided(b *testing.B) {
	body := enginetest.LargeUpdate(b)
	const user = "system:serviceaccount:ci:deployer"
	for _, state := range []fencestate.State{eastActive, westFenced} {
		e := newEngine(b, engine.Options{ConfigFile: writeTemp(b, "config.json", chartConfig)})
		writeFence(b, e, state)
		b.Run(string(state.Status), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				i++
				// Same length, so that only the user differs.
				next := bytes.Replace(body, []byte(user), fmt.Appendf(nil, "system:serviceaccount:ci:%08d", i), 1)
				if _, err := e.Admit(context.Background(), next); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAdmit measures one admission decision of a realistic UPDATE of
// about 6 KB, by the engine (answered from remembered decisions after the
// first) and by the reference evaluator: OPA evaluating the whole policy
// with the whole AdmissionReview, decoded by encoding/json, as OPA's own
// server does. The difference is what the fast path saves.
func BenchmarkAdmit(b *testing.B) {
	body := enginetest.LargeUpdate(b)
	for _, state := range []fencestate.State{eastActive, westFenced} {
		p := newPair(b, nil, "")
		p.writeFence(b, state)
		for name, admit := range map[string]func() error{
			"engine": func() error {
				_, err := p.engine.Admit(context.Background(), body)
				return err
			},
			"reference": func() error {
				_, err := p.reference.Admit(context.Background(), body)
				return err
			},
		} {
			b.Run(string(state.Status)+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					if err := admit(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkReconcile measures the controller's question for one Component.
func BenchmarkReconcile(b *testing.B) {
	e := newEngine(b, engine.Options{})
	writeFence(b, e, westFenced)
	component := map[string]any{
		"apiVersion": "components.fencegate.dev/v1alpha1", "kind": "Component",
		"metadata": map[string]any{"name": "billing", "namespace": "default"},
		"spec":     map[string]any{"enabled": true, "chart": map[string]any{"name": "billing", "version": "1.4.2"}},
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Reconcile(context.Background(), "default", component); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTransitionAmongDomains measures a fence transition of one domain
// with 1 and with 100 domains served: a write replaces that domain's
// snapshot only, so the cost should not grow with the others.
func BenchmarkTransitionAmongDomains(b *testing.B) {
	for _, served := range []int{1, domain.MaxServed} {
		b.Run(fmt.Sprintf("domains=%d", served), func(b *testing.B) {
			domains := []string{rpctypes.DefaultDomain}
			for i := 1; i < served; i++ {
				domains = append(domains, fmt.Sprintf("d%d", i))
			}
			e := newEngine(b, engine.Options{Domains: domains})
			for _, d := range domains[1:] {
				state := eastActive
				state.Domain = d
				writeFence(b, e, state)
			}
			alternateTransitions(b, e)
		})
	}
}

// alternateTransitions times fence transitions of the default domain,
// active and fenced in turn.
func alternateTransitions(b *testing.B, e *engine.Engine) {
	states := []fencestate.State{eastActive, westFenced}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		writeFence(b, e, states[i%2])
	}
}
