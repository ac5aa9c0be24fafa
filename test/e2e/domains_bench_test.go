package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/stack"
)

// servedWindow is how long BenchmarkServedDomains watches each set-up once
// every domain is held: six heartbeats of each domain at the default
// declare interval (5s).
const servedWindow = 30 * time.Second

// BenchmarkServedDomains measures what each served fence domain costs while
// nothing changes: one real control plane served by one `fencegate run`
// against an authority with mTLS, first serving 1 domain, then
// domain.MaxServed (100). Over the same window for each, it takes the CPU
// time of the fencegate process and of the authority (with its embedded
// etcd), the declarations the authority answered (each domain's agent
// heartbeats on its own, over the one shared connection) and the fencegate
// process's heap in use after a collection and its resident anonymous
// memory (which adds the heap's headroom for garbage and the goroutines'
// stacks). It reports the differences per heartbeat and per domain. Run it with -benchtime 1x (make bench does).
func BenchmarkServedDomains(b *testing.B) {
	cluster.RequireControlPlane(b)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	bin, err := stack.Build(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		// One stack after the other: the first is stopped before the
		// second starts, so that neither's CPU shows in the other's.
		one := measureServed(b, ctx, bin, 1)
		many := measureServed(b, ctx, bin, domain.MaxServed)
		heartbeats := float64(many.declarations - one.declarations)
		if heartbeats <= 0 {
			b.Fatalf("%d declarations with %d domains, %d with 1: the heartbeats did not grow with the domains", many.declarations, domain.MaxServed, one.declarations)
		}
		b.Logf("1 domain: %s; %d domains: %s", one, domain.MaxServed, many)
		b.ReportMetric(float64((many.run-one.run).Microseconds())/heartbeats, "run-µs/heartbeat")
		b.ReportMetric(float64((many.authority-one.authority).Microseconds())/heartbeats, "authority-µs/heartbeat")
		b.ReportMetric(float64(many.declarations)/servedWindow.Seconds()/domain.MaxServed, "heartbeats/s/domain")
		b.ReportMetric((float64(many.memory.heap)-float64(one.memory.heap))/(domain.MaxServed-1)/1024, "heap-KiB/domain")
		b.ReportMetric((float64(many.memory.anon)-float64(one.memory.anon))/(domain.MaxServed-1)/1024, "anon-KiB/domain")
		b.ReportMetric(float64(many.memory.anon)/(1<<20), "anon-MiB@100")
		b.ReportMetric(0, "ns/op")
	}
}

// servedCost is what one set-up used over servedWindow.
type servedCost struct {
	run, authority time.Duration
	declarations   int64
	// memory is what the fencegate process held at the window's end.
	memory memoryReading
}

func (c servedCost) String() string {
	return fmt.Sprintf("fencegate %s CPU, authority %s CPU, %d declarations, fencegate %.1f MiB heap in use, %.1f MiB anonymous",
		c.run.Round(time.Millisecond), c.authority.Round(time.Millisecond), c.declarations,
		float64(c.memory.heap)/(1<<20), float64(c.memory.anon)/(1<<20))
}

// measureServed starts a stack whose one cluster serves n domains, waits
// until it holds every one's fence and enforces it, and measures a window.
func measureServed(b *testing.B, ctx context.Context, bin string, n int) servedCost {
	b.Helper()
	var others []string
	for i := 1; i < n; i++ {
		others = append(others, fmt.Sprintf("app-%03d", i))
	}
	s, err := stack.Start(ctx, stack.Options{
		Binary:   bin,
		Dir:      b.TempDir(),
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1}},
		Domains:  others,
		MTLS:     true,
		// For the heap in use after a collection (readMemory).
		Profiling: true,
	})
	defer func() {
		if err := s.Stop(); err != nil {
			b.Error(err)
		}
	}()
	if err != nil {
		b.Fatal(err)
	}
	east := s.Cluster("east")
	waitAllHeld(b, ctx, east, n)

	run, authority := cpuOf(b, east.Run.Pid()), cpuOf(b, s.Authority.Pid())
	declared := declarations(b, ctx, s)
	time.Sleep(servedWindow)
	cost := servedCost{
		run:          cpuOf(b, east.Run.Pid()) - run,
		authority:    cpuOf(b, s.Authority.Pid()) - authority,
		declarations: declarations(b, ctx, s) - declared,
	}
	cost.memory = readMemory(b, ctx, east.Replicas[0])
	return cost
}

// waitAllHeld waits until the cluster's n Fences are Holding and Enforced.
func waitAllHeld(b *testing.B, ctx context.Context, c *stack.Cluster, n int) {
	b.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		var fences fencegatev1alpha1.FenceList
		if err := c.ControlPlane.Client.List(ctx, &fences); err != nil {
			b.Fatal(err)
		}
		held := 0
		for i := range fences.Items {
			if conditions(&fences.Items[i]) == holdingEnforced {
				held++
			}
		}
		if held == n {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: %d of %d Fences Holding and Enforced after 3 minutes", c.Name, held, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cpuOf is the CPU time (user and system) process pid has used.
func cpuOf(b *testing.B, pid int) time.Duration {
	b.Helper()
	p, err := procfs.NewProc(pid)
	if err != nil {
		b.Fatal(err)
	}
	st, err := p.Stat()
	if err != nil {
		b.Fatal(err)
	}
	return time.Duration(st.CPUTime() * float64(time.Second))
}

// declarations is the authority's count of declarations answered, of every
// outcome.
func declarations(b *testing.B, ctx context.Context, s *stack.Stack) int64 {
	b.Helper()
	total, err := sumMetric(ctx, s.AuthorityMetricsAddress(), "fencegate_authority_declarations_total")
	if err != nil {
		b.Fatal(err)
	}
	return int64(total)
}
