package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/test/stack"
)

// memoryNamespace holds the Components BenchmarkRunMemory makes.
const memoryNamespace = "default"

// memoryShort is BenchmarkRunMemory's -short size, which TestRunMemory runs.
const memoryShort = 100

// BenchmarkRunMemory measures what each cached Component costs the memory
// of a real `fencegate run`: one control plane served by one fencegate that
// holds the fence, measured first over no Component, then once it has
// marked 1,000 and then 10,000 Components (made through its webhooks, as
// people make them, each stamped). Before each reading fencegate collects
// its garbage (its heap profile with gc=1).
//
// It reports, for each size, the heap in use it grew by over no
// Component, per Component (goal: at most 4 KiB), and as read: the heap in
// use, the resident anonymous memory, the whole resident set (the binary's
// pages with it) and the peak resident set so far (VmHWM), in MiB. The
// anonymous memory also holds what the runtime has freed but not yet
// handed back to the system, which it does over seconds to minutes, so
// its growth per Component moves with when it is read; the heap in use is
// what the process must hold. Run it with -benchtime 1x (make bench does);
// -short makes 100 Components.
func BenchmarkRunMemory(b *testing.B) {
	sizes := []int{1000, 10000}
	if testing.Short() {
		sizes = []int{memoryShort}
	}
	m := startRunMemory(b)
	for _, n := range sizes {
		b.Run(fmt.Sprintf("components=%d", n), func(b *testing.B) {
			var r memoryReading
			for b.Loop() {
				r = m.measure(b, n)
			}
			perComponent := (float64(r.heap) - float64(m.none.heap)) / float64(n)
			b.ReportMetric(perComponent, "heap-B/component")
			b.ReportMetric(mib(r.heap), "heap-MiB")
			b.ReportMetric(mib(r.anon), "anon-MiB")
			b.ReportMetric(mib(r.resident), "rss-MiB")
			b.ReportMetric(mib(r.peak), "peak-rss-MiB")
			b.ReportMetric(0, "ns/op")
			b.Logf("%d Components: %s; over none (%s): %+.0f bytes of heap per Component", n, r, m.none, perComponent)
		})
	}
}

// TestRunMemory runs BenchmarkRunMemory's -short size, so that its code
// path stays tested: every Component made is marked, and the process's
// memory is read.
func TestRunMemory(t *testing.T) {
	m := startRunMemory(t)
	r := m.measure(t, memoryShort)
	if r.heap == 0 || r.anon == 0 || r.resident < r.anon || r.peak < r.resident {
		t.Fatalf("%d Components: %s: want a heap in use, and anonymous ≤ resident ≤ peak, none of them 0", memoryShort, r)
	}
	t.Logf("no Component: %s; %d Components: %s", m.none, memoryShort, r)
}

// runMemory is one cluster's fencegate, its Components so far, and its
// memory over none.
type runMemory struct {
	ctx     context.Context
	cluster *stack.Cluster
	// client makes the Components, without a client-side limit.
	client client.Client
	// token is the fencing token every Component is marked with.
	token int64
	made  int
	none  memoryReading
}

// startRunMemory starts an authority and one cluster whose fencegate holds
// the fence, and reads fencegate's memory over no Component.
func startRunMemory(tb testing.TB) *runMemory {
	tb.Helper()
	ctx := tb.Context()
	s := stack.StartForTest(tb, ctx, stack.Options{
		Clusters:  []stack.ClusterSpec{{Name: "east", Epoch: 1}},
		Profiling: true,
	})
	east := s.Cluster("east")
	cfg := rest.CopyConfig(east.ControlPlane.Config)
	cfg.QPS = -1
	cl, err := client.New(cfg, client.Options{Scheme: east.ControlPlane.Scheme})
	if err != nil {
		tb.Fatal(err)
	}
	m := &runMemory{ctx: ctx, cluster: east, client: cl}
	m.token = waitHeldDefault(tb, ctx, cl).Status.Token
	m.waitQuiet(tb)
	m.none = m.read(tb)
	return m
}

// measure makes Components until there are n, waits until fencegate has
// marked every one and gone quiet, and reads its memory.
func (m *runMemory) measure(tb testing.TB, n int) memoryReading {
	tb.Helper()
	g, ctx := errgroup.WithContext(m.ctx)
	g.SetLimit(32)
	for i := m.made; i < n; i++ {
		g.Go(func() error {
			c := latencyComponent(memoryNamespace, fmt.Sprintf("mem-%05d", i))
			if err := m.client.Create(ctx, c); err != nil {
				return fmt.Errorf("create %s: %w", c.Name, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		tb.Fatal(err)
	}
	m.made = max(m.made, n)
	m.waitMarked(tb)
	m.waitQuiet(tb)
	return m.read(tb)
}

// waitMarked waits until every Component made is marked with the fence's
// token.
func (m *runMemory) waitMarked(tb testing.TB) {
	tb.Helper()
	marked := 0
	err := wait.PollUntilContextTimeout(m.ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		var comps fencegatev1alpha1.ComponentList
		if err := m.client.List(ctx, &comps, client.InNamespace(memoryNamespace)); err != nil {
			return false, err
		}
		marked = 0
		for i := range comps.Items {
			if f := comps.Items[i].Status.Fence; f != nil && f.Token == m.token {
				marked++
			}
		}
		return marked == m.made, nil
	})
	if err != nil {
		tb.Fatalf("%d of %d Components marked with token %d: %v", marked, m.made, m.token, err)
	}
}

// waitQuiet waits until fencegate has gone two seconds without a
// reconcile of its Component controller.
func (m *runMemory) waitQuiet(tb testing.TB) {
	tb.Helper()
	last, since := -1.0, time.Now()
	err := wait.PollUntilContextTimeout(m.ctx, 200*time.Millisecond, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
		now, err := sumMetric(ctx, m.cluster.Metrics, `controller_runtime_reconcile_total{controller="component"`)
		if err != nil {
			return false, err
		}
		if now != last {
			last, since = now, time.Now()
		}
		return time.Since(since) >= 2*time.Second, nil
	})
	if err != nil {
		tb.Fatalf("fencegate's controller never went quiet: %v", err)
	}
}

// sumMetric sums the samples of the metric that the /metrics of addr
// serves under name. Name may go on with the first of its labels, as
// exposed (`x{a="b"` matches `x{a="b"}` and `x{a="b",c="d"}`).
func sumMetric(ctx context.Context, addr, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape %s: %w", addr, err)
	}
	defer func() { _ = resp.Body.Close() }()
	total, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		matches := false
		for _, next := range []string{" ", "{", ",", "}"} {
			matches = matches || strings.HasPrefix(line, name+next)
		}
		if !matches {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("%s of %s: %q: %w", name, addr, line, err)
		}
		total, found = total+v, true
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("%s serves no %s", addr, name)
	}
	return total, nil
}

// read makes fencegate collect its garbage, then reads its heap in use
// and its resident memory.
func (m *runMemory) read(tb testing.TB) memoryReading {
	tb.Helper()
	return readMemory(tb, m.ctx, m.cluster.Replicas[0])
}

// readMemory makes a fencegate run replica (started with profiling) collect
// its garbage, then reads its heap in use and its resident memory.
func readMemory(tb testing.TB, ctx context.Context, r *stack.Replica) memoryReading {
	tb.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.Pprof+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("make fencegate collect its garbage: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("fencegate's heap profile: HTTP %d", resp.StatusCode)
	}
	heap, err := sumMetric(ctx, r.Metrics, "go_memstats_heap_inuse_bytes")
	if err != nil {
		tb.Fatal(err)
	}
	p, err := procfs.NewProc(r.Run.Pid())
	if err != nil {
		tb.Fatal(err)
	}
	status, err := p.NewStatus()
	if err != nil {
		tb.Fatal(err)
	}
	return memoryReading{heap: uint64(heap), anon: status.RssAnon, resident: status.VmRSS, peak: status.VmHWM}
}

// memoryReading is what a process held at one moment, in bytes.
type memoryReading struct {
	// heap is the heap in use once garbage was collected: what the
	// process must hold.
	heap uint64
	// anon is the resident anonymous memory (the heap, whatever of it the
	// runtime has not handed back yet, and stacks); resident the whole
	// resident set, the binary's pages with it; peak the largest resident
	// set so far.
	anon, resident, peak uint64
}

func (r memoryReading) String() string {
	return fmt.Sprintf("heap in use %.1f MiB, %.1f MiB anonymous, %.1f MiB resident, peak %.1f MiB",
		mib(r.heap), mib(r.anon), mib(r.resident), mib(r.peak))
}

// mib is n bytes in MiB.
func mib(n uint64) float64 { return float64(n) / (1 << 20) }
