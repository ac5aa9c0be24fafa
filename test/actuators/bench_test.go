package actuators

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/cluster"
)

// BenchmarkHoldMixedKinds measures, on a real API server with the real
// CRDs, how long the hold controller takes after a fence transition until
// every one of 1,000 objects of mixed kinds is held (s-held: every hold
// patch accepted and decided), until every held object the rules can call
// quiet is quiet (s-quiesced: includes the harness's --hold-quiet-for of
// 1 s), and until every one is released (s-released), each against its
// floor (s-floor: a bare client sending the same patches, measured first
// on the same API server; held/floor). The objects are
// spread evenly over the kinds of TestShippedHoldsOnRealCRDs and the
// CronJob, each a copy of that test's object; no actuator runs. The
// controller's client has no client-side limit, as the chart runs it.
// -short holds 8 of each.
func BenchmarkHoldMixedKinds(b *testing.B) {
	kinds := append(shippedKinds(), cronJobKind())
	each := 1000 / len(kinds)
	if testing.Short() {
		each = 8
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	cp := cluster.StartForTest(b, cluster.Options{Name: "mixed", CRDs: realCRDs(b, kinds[:len(kinds)-1])})
	f := enginetest.NewSwitch(b, active)
	resources := make([]schema.GroupResource, 0, len(kinds))
	for _, k := range kinds {
		resources = append(resources, k.resource)
	}
	// No client-side limit, as the chart runs fencegate beside its
	// FlowSchema (--kube-api-qps=-1).
	unlimited := *cp
	unlimited.Config = rest.CopyConfig(cp.Config)
	unlimited.Config.QPS = -1
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, k := range kinds {
		for i := range each {
			g.Go(func() error {
				o := &unstructured.Unstructured{Object: runtime.DeepCopyJSON(k.object)}
				o.SetName(fmt.Sprintf("%s-%04d", o.GetName(), i))
				return cp.Client.Create(gctx, o)
			})
		}
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	floor := patchFloor(b, ctx, &unlimited, f, kinds, 3)
	holder := startHolder(b, &unlimited, f, resources...)
	// until waits until every kind's objects are all decided for the state
	// s, held or not as s wants, and quiet too when quiet is set.
	until := func(s fencestate.State, quiet bool) time.Duration {
		start := time.Now()
		var why string
		err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
			p := holder.Progress("default")
			for _, k := range kinds {
				kp, ok := kindProgress(p, k.kind)
				held := 0
				if s.Status != fencestate.Active {
					held = each
				}
				if !ok || kp.Key != s.Key() || kp.Pending != 0 || kp.Total != each || kp.Held != held {
					why = fmt.Sprintf("%s: %+v", k.kind, kp)
					return false, nil
				}
				if quiet && k.activity == "" && kp.Quiet != held {
					why = fmt.Sprintf("%s: %d of %d quiet", k.kind, kp.Quiet, held)
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			b.Fatalf("waiting for %d objects of each of %d kinds decided for %s: %v; %s", each, len(kinds), s.Status, err, why)
		}
		return time.Since(start)
	}
	until(active, false)

	var held, quiesced, released []time.Duration
	for b.Loop() {
		start := time.Now()
		f.Set(b, fenced)
		held = append(held, until(fenced, false))
		until(fenced, true)
		quiesced = append(quiesced, time.Since(start))
		start = time.Now()
		f.Set(b, active)
		until(active, false)
		released = append(released, time.Since(start))
	}
	for _, d := range [][]time.Duration{held, quiesced, released} {
		slices.Sort(d)
	}
	b.ReportMetric(float64(each*len(kinds)), "objects")
	b.ReportMetric(floor[len(floor)-1].Seconds(), "s-floor-max")
	b.ReportMetric(held[len(held)-1].Seconds()/floor[len(floor)-1].Seconds(), "held/floor")
	b.ReportMetric(held[len(held)-1].Seconds(), "s-held-max")
	b.ReportMetric(quiesced[len(quiesced)-1].Seconds(), "s-quiesced-max")
	b.ReportMetric(released[len(released)-1].Seconds(), "s-released-max")
}

// patchFloor holds and releases every object of kinds rounds times as a
// bare client would: each with the very patch the hold controller would
// send (planned, before the pass is timed, from the policies' decision for
// the fence state the pass goes to), as fencegate's field manager, as many
// at once as the controller's workers for all the kinds. It returns each
// pass's time, sorted, and leaves the fence active.
func patchFloor(b *testing.B, ctx context.Context, cp *cluster.ControlPlane, f *enginetest.Switch, kinds []realKind, rounds int) []time.Duration {
	b.Helper()
	var objs []*unstructured.Unstructured
	for _, k := range kinds {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion(k.object["apiVersion"].(string))
		list.SetKind(k.object["kind"].(string) + "List")
		if err := cp.Client.List(ctx, list); err != nil {
			b.Fatal(err)
		}
		for i := range list.Items {
			objs = append(objs, &list.Items[i])
		}
	}
	var passes []time.Duration
	for range rounds {
		for _, s := range []fencestate.State{fenced, active} {
			f.Set(b, s)
			patches := make([][]byte, len(objs))
			for i, o := range objs {
				d, err := f.Engine.Hold(ctx, "default", o.Object)
				if err != nil {
					b.Fatal(err)
				}
				step, err := hold.Plan(o.Object, d)
				if err != nil || step.Action == hold.Nothing {
					b.Fatalf("%s %s: no step for %s (%v)", o.GetKind(), o.GetName(), s.Status, err)
				}
				if patches[i], err = json.Marshal(step.Patch); err != nil {
					b.Fatal(err)
				}
			}
			start := time.Now()
			g, gctx := errgroup.WithContext(ctx)
			g.SetLimit(len(kinds) * hold.DefaultMaxConcurrentReconciles)
			for i, o := range objs {
				g.Go(func() error {
					return cp.Client.Patch(gctx, o, client.RawPatch(types.JSONPatchType, patches[i]), client.FieldOwner(hold.FieldManager))
				})
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			passes = append(passes, time.Since(start))
		}
	}
	slices.Sort(passes)
	return passes
}

// cronJobKind is the CronJob, a built-in kind, as a realKind (no CRD).
func cronJobKind() realKind {
	return realKind{
		rule:     "cronjob",
		resource: schema.GroupResource{Group: "batch", Resource: "cronjobs"},
		kind:     "CronJob.batch",
		object: map[string]any{
			"apiVersion": "batch/v1",
			"kind":       "CronJob",
			"metadata":   map[string]any{"name": "report", "namespace": "default"},
			"spec": map[string]any{
				"schedule": "*/5 * * * *",
				"suspend":  false,
				"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
					"restartPolicy": "Never",
					"containers":    []any{map[string]any{"name": "report", "image": "busybox"}},
				}}}},
			},
		},
	}
}
