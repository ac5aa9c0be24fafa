package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
	"github.com/fencegate/fencegate/test/cluster"
)

// cacheSizes are the numbers of Components BenchmarkCacheMemory caches;
// -short caches 100, the size TestCacheMemory runs.
func cacheSizes() []int {
	if testing.Short() {
		return []int{100}
	}
	return []int{1000, 10_000}
}

// sizeLabel is the label of the Components that a cache of size n and
// above selects.
const sizeLabel = "bench.fencegate.dev/size"

// BenchmarkCacheMemory measures, on a real API server, what a cache of
// Components costs per Component: its live heap once synced, less that of
// the same cache synced over none, divided by the Components it holds. It
// caches realistic Components (applied by kubectl, with an actuator's and
// fencegate's status applies) once whole and once as CacheByObject trims
// them, in the same run, and reports both, the bytes the trimming saves
// and their ratio.
//
// The live heap (runtime.MemStats.HeapAlloc after a collection) is what
// the cache holds; a process's RSS follows it at a distance set by GOGC
// (the heap grows to twice the live heap with the default of 100 before the
// next collection), and by pages the runtime has not yet returned, both
// of which blur what one object costs.
func BenchmarkCacheMemory(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	sizes := cacheSizes()
	cp := createCachedComponents(b, ctx, sizes)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("components=%d", n), func(b *testing.B) {
			var m cacheMemory
			for b.Loop() {
				m = measureCacheMemory(b, ctx, cp, n)
			}
			b.ReportMetric(m.whole, "B/component-whole")
			b.ReportMetric(m.trimmed, "B/component-trimmed")
			b.ReportMetric(m.whole-m.trimmed, "B/component-saved")
			b.ReportMetric(m.trimmed/m.whole, "trimmed/whole")
		})
	}
}

// TestCacheMemory runs BenchmarkCacheMemory's measurement at its -short
// size, so that its code path stays tested, and checks that the trimmed
// cache holds less per Component than the whole one.
func TestCacheMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	const n = 100
	cp := createCachedComponents(t, ctx, []int{n})
	m := measureCacheMemory(t, ctx, cp, n)
	t.Logf("bytes per cached Component: %.0f whole, %.0f trimmed", m.whole, m.trimmed)
	if m.trimmed >= m.whole {
		t.Errorf("a trimmed Component costs %.0f bytes in the cache, a whole one %.0f: want less", m.trimmed, m.whole)
	}
}

// cacheMemory is the live heap per cached Component, whole and trimmed.
type cacheMemory struct{ whole, trimmed float64 }

// measureCacheMemory measures the bytes per Component of caches of the n
// smallest-sized Components, whole and trimmed.
func measureCacheMemory(t testing.TB, ctx context.Context, cp *cluster.ControlPlane, n int) cacheMemory {
	t.Helper()
	none := cachedHeap(t, ctx, cp, sizeSelector(t, 0), nil)
	whole := cachedHeap(t, ctx, cp, sizeSelector(t, n), nil)
	trimmed := cachedHeap(t, ctx, cp, sizeSelector(t, n), controller.TrimComponent)
	return cacheMemory{
		whole:   float64(int64(whole)-int64(none)) / float64(n),
		trimmed: float64(int64(trimmed)-int64(none)) / float64(n),
	}
}

// sizeSelector selects the Components of a cache of size n: none for 0.
func sizeSelector(t testing.TB, n int) labels.Selector {
	t.Helper()
	values := []string{"none"}
	for _, s := range []int{100, 1000, 10_000} {
		if s <= n {
			values = append(values, strconv.Itoa(s))
		}
	}
	r, err := labels.NewRequirement(sizeLabel, selection.In, values)
	if err != nil {
		t.Fatal(err)
	}
	return labels.NewSelector().Add(*r)
}

// liveHeap is the heap's live bytes after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// cachedHeap starts a cache of the Components that selector selects,
// transformed by transform, waits until it holds them all, and returns how
// much the live heap grew, then stops the cache.
func cachedHeap(t testing.TB, ctx context.Context, cp *cluster.ControlPlane, selector labels.Selector, transform func(any) (any, error)) uint64 {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	before := liveHeap()
	c, err := cache.New(cp.Config, cache.Options{
		Scheme: cp.Scheme,
		ByObject: map[client.Object]cache.ByObject{
			&fencegatev1alpha1.Component{}: {Label: selector, Transform: transform},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &fencegatev1alpha1.Component{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache of Components never synced")
	}
	after := liveHeap()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(c)
	return after - min(before, after)
}

// createCachedComponents starts a control plane with the Components that
// caches of sizes select: those of the smallest size labelled with it,
// then those of the next, and so on.
func createCachedComponents(t testing.TB, ctx context.Context, sizes []int) *cluster.ControlPlane {
	t.Helper()
	cp := cluster.StartForTest(t, cluster.Options{Name: "cache-memory"})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range slices.Max(sizes) {
		size := 0
		for _, s := range sizes {
			if i < s {
				size = s
				break
			}
		}
		g.Go(func() error { return createApplied(gctx, cp.Client, i, size) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return cp
}

// createApplied makes Component i as a cluster that runs it has it: made
// by kubectl apply (client-side: the last-applied annotation and its
// manager's managedFields), its access and readiness applied by an
// actuator, its fence condition and status by fencegate.
func createApplied(ctx context.Context, c client.Client, i, size int) error {
	name := fmt.Sprintf("component-%05d", i)
	values, err := json.Marshal(map[string]any{
		"replicas": 2,
		"image":    map[string]any{"repository": "registry.example.com/payments/billing", "tag": "1.4." + strconv.Itoa(i%10)},
		"resources": map[string]any{
			"requests": map[string]any{"cpu": "100m", "memory": "128Mi"},
			"limits":   map[string]any{"memory": "256Mi"},
		},
	})
	if err != nil {
		return err
	}
	comp := &fencegatev1alpha1.Component{
		TypeMeta: metav1.TypeMeta{APIVersion: fencegatev1alpha1.GroupVersion.String(), Kind: "Component"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default",
			Labels: map[string]string{"app.kubernetes.io/name": "billing", "app.kubernetes.io/part-of": "payments", sizeLabel: strconv.Itoa(size)},
		},
		Spec: fencegatev1alpha1.ComponentSpec{
			Enabled: true,
			Chart:   fencegatev1alpha1.ChartRef{Repository: "https://charts.example.com/payments", Name: "billing", Version: "1.4.2"},
			Values:  &apiextensionsv1.JSON{Raw: values},
		},
	}
	lastApplied, err := json.Marshal(comp)
	if err != nil {
		return err
	}
	comp.Annotations = map[string]string{controller.LastAppliedAnnotation: string(lastApplied) + "\n"}
	if err := c.Create(ctx, comp, client.FieldOwner("kubectl-client-side-apply")); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	now := time.Now().UTC().Truncate(time.Second).Format(time.RFC3339)
	condition := func(typ, status, reason, message string) map[string]any {
		return map[string]any{"type": typ, "status": status, "reason": reason, "message": message, "lastTransitionTime": now, "observedGeneration": int64(1)}
	}
	for _, apply := range []struct {
		manager string
		status  map[string]any
	}{
		{"example-actuator", map[string]any{
			"access":     []any{map[string]any{"name": "web", "url": "https://" + name + ".payments.example.com"}},
			"conditions": []any{condition(fencegatev1alpha1.ConditionReady, "True", "Deployed", "release "+name+" deployed at revision 3")},
		}},
		{controller.FieldManager, map[string]any{
			"observedGeneration": int64(1),
			"fence":              map[string]any{"state": "active", "epoch": int64(7), "holder": "east@7", "token": int64(1042), "since": now},
			"conditions":         []any{condition(fencegatev1alpha1.ConditionSourceConflict, "False", fencegatev1alpha1.ReasonFenceHeld, "east holds the fence of domain default at epoch 7")},
		}},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{"status": apply.status}}
		u.SetGroupVersionKind(fencegatev1alpha1.GroupVersion.WithKind("Component"))
		u.SetNamespace(comp.Namespace)
		u.SetName(name)
		if err := c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(apply.manager)); err != nil {
			return fmt.Errorf("apply the status of %s as %s: %w", name, apply.manager, err)
		}
	}
	return nil
}
