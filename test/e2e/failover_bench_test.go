package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/failover"
	"github.com/fencegate/fencegate/test/stack"
)

// BenchmarkFailover measures failovers between two reachable clusters, each
// served by two fencegate replicas: the time `fencegate failover --wait`
// takes, from raising spec.epoch until the target is Holding and Enforced
// and the old holder is fenced and Enforced. Each iteration fails over to
// the other cluster. The sub-benchmarks differ in the Components each
// side's controller re-marks twice per failover (the taking over and the
// fenced state, then the holder's name). Run it with -benchtime 20x (make
// bench does); it reports the p50 and the p99 (of 20 failovers, the
// slowest) and logs the slowest one's timeline.
func BenchmarkFailover(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	s := stack.StartForTest(b, ctx, stack.Options{
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1, Replicas: 2}, {Name: "west", Epoch: 1, Replicas: 2}},
		MTLS:     true,
	})
	clusters := map[string]failover.Cluster{}
	for _, c := range s.Clusters {
		cl, err := client.NewWithWatch(c.ControlPlane.Config, client.Options{Scheme: c.ControlPlane.Scheme})
		if err != nil {
			b.Fatal(err)
		}
		clusters[c.Name] = failover.Cluster{Context: c.Name, Client: cl}
	}
	order := []string{"west", "east"}
	created := 0
	for _, components := range []int{0, 20} {
		b.Run(fmt.Sprintf("components=%d", components), func(b *testing.B) {
			// Components on both sides: each is created on the holder,
			// so the fence goes to each side once.
			for i := range 2 {
				if _, err := failOver(ctx, clusters, order[i], order[1-i]); err != nil {
					b.Fatalf("failover to %s: %v", order[i], err)
				}
				c := s.Cluster(order[i])
				for j := created; j < components; j++ {
					if res, err := c.ControlPlane.Kubectl(ctx, componentJSON(fmt.Sprintf("bench-%02d", j)), "apply", "-f", "-"); err != nil || res.ExitCode != 0 {
						b.Fatalf("create a Component on %s: %v %s", c.Name, err, res.Stderr)
					}
				}
			}
			created = components

			var took []time.Duration
			var slowest string
			for i := 0; b.Loop(); i++ {
				to, from := order[i%2], order[(i+1)%2]
				start := time.Now()
				timeline, err := failOver(ctx, clusters, to, from)
				if err != nil {
					b.Fatalf("failover %d to %s: %v", i, to, err)
				}
				d := time.Since(start)
				if len(took) == 0 || d > slices.Max(took) {
					slowest = timeline
				}
				took = append(took, d)
			}
			slices.Sort(took)
			p50, p99 := percentile(took, 0.50), percentile(took, 0.99)
			b.ReportMetric(p50.Seconds(), "p50-s")
			b.ReportMetric(p99.Seconds(), "p99-s")
			b.ReportMetric(0, "ns/op")
			b.Logf("%d failovers, %d Components per side: p50 %s, p99 %s, fastest %s (goal: p99 ≤ 1s); the slowest:\n%s",
				len(took), components, p50.Round(time.Millisecond), p99.Round(time.Millisecond), took[0].Round(time.Millisecond), slowest)
		})
	}
}

// failOver fails over to the cluster to from from, waits until it is done
// and returns the timeline.
func failOver(ctx context.Context, clusters map[string]failover.Cluster, to, from string) (string, error) {
	f := clusters[from]
	var out bytes.Buffer
	err := failover.Run(ctx, failover.Options{Domain: "default", To: clusters[to], From: &f, Wait: true, Timeout: time.Minute, Out: &out})
	return out.String(), err
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}
