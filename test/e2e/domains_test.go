package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/test/stack"
)

// TestDomainsFailOverOneByOne: two real control planes serve three fence
// domains (default, and payments and search by their namespaces' label).
// East holds default and search, west payments: each cluster admits only
// its own domains' Components. Failing search over to west while writers
// run in all three domains moves search only: the writers of default and
// payments are never refused, and their Components are not re-marked.
func TestDomainsFailOverOneByOne(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := stack.StartForTest(t, ctx, stack.Options{
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 2}, {Name: "west", Epoch: 1}},
		Domains:  []string{"payments", "search"},
		// The holders release at once, so the lease's length does not slow
		// the failovers down. A long one keeps the untouched domains'
		// renewals from lapsing on a loaded machine (a 4 s lease leaves 2 s
		// after the margin), which would refuse their writes for a reason
		// this test is not about.
		LeaseTTL:      12 * time.Second,
		InstanceLease: 3 * time.Second,
		MTLS:          true,
		Say:           t.Logf,
	})
	east, west := s.Cluster("east"), s.Cluster("west")
	namespaces := map[string]string{"default": "default", "payments": "shop", "search": "find"}
	for _, c := range []*stack.Cluster{east, west} {
		for d, ns := range namespaces {
			if ns == "default" {
				continue
			}
			obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{domain.Label: d}}}
			if err := c.ControlPlane.Client.Create(ctx, obj); err != nil {
				t.Fatalf("%s: create namespace %s: %v", c.Name, ns, err)
			}
		}
		for d := range namespaces {
			waitFenceOf(t, ctx, c, d, "enforced", time.Minute, func(f *fencegatev1alpha1.Fence) bool {
				return conditions(f) == map[bool]string{true: holdingEnforced, false: fencedEnforced}[c == east]
			})
		}
	}

	out, stderr, exit, err := s.Failover(ctx, "--domain", "payments", "--to", "west", "--from", "east", "--wait", "--timeout", "1m")
	if err != nil || exit != 0 {
		t.Fatalf("failover of payments to west: exit %d %v\n%s\n%s", exit, err, out, stderr)
	}
	holders := map[string]*stack.Cluster{"default": east, "payments": west, "search": east}
	for d, ns := range namespaces {
		for _, c := range []*stack.Cluster{east, west} {
			exit, stderr := dryRunCreateIn(t, ctx, c, ns, "probe")
			if want := c == holders[d]; (exit == 0) != want {
				t.Errorf("%s admits a Component of domain %s: %v, want %v (%s)", c.Name, d, exit == 0, want, stderr)
			}
		}
	}

	// A Component in each domain that nobody changes: a re-mark would
	// change its resourceVersion.
	still := map[string]string{}
	for d, ns := range namespaces {
		c := holders[d]
		if res, err := c.ControlPlane.Kubectl(ctx, componentIn(ns, "still"), "apply", "-f", "-"); err != nil || res.ExitCode != 0 {
			t.Fatalf("%s: create %s/still: %v %s", c.Name, ns, err, res.Stderr)
		}
		still[d] = markedVersion(t, ctx, c, ns, "still")
	}

	writers := map[string]*writer{}
	for d, ns := range namespaces {
		writers[d] = startWriterIn(ctx, holders[d], ns)
		writers[d].waitResults(t, 3)
	}
	out, stderr, exit, err = s.Failover(ctx, "--domain", "search", "--to", "west", "--from", "east", "--wait", "--timeout", "1m")
	if err != nil || exit != 0 {
		t.Fatalf("failover of search to west: exit %d %v\n%s\n%s", exit, err, out, stderr)
	}
	// The writes go on for a while after the move, on the untouched
	// domains' holders and on search's former one.
	for _, w := range writers {
		w.waitResults(t, len(w.snapshot())+3)
	}
	for d, w := range writers {
		results := w.stop()
		refused, reasons := 0, []string{}
		for _, r := range results {
			if !r.admitted {
				refused++
				reasons = append(reasons, fmt.Sprintf("%s: %s", r.start.Format(time.RFC3339Nano), strings.TrimSpace(r.stderr)))
			}
		}
		t.Logf("domain %s: %d writes on %s, %d refused", d, len(results), holders[d].Name, refused)
		switch d {
		case "search":
			if refused == 0 || !results[0].admitted {
				t.Errorf("search on east: %d of %d writes refused; want the first admitted and the last ones refused once west holds it", refused, len(results))
			}
		default:
			if refused > 0 {
				t.Errorf("domain %s: %d of %d writes on %s refused while another domain failed over:\n%s", d, refused, len(results), holders[d].Name, strings.Join(reasons, "\n"))
			}
		}
	}
	for _, d := range []string{"default", "payments"} {
		c, ns := holders[d], namespaces[d]
		if got := resourceVersion(t, ctx, c, ns, "still"); got != still[d] {
			t.Errorf("domain %s: %s/still was written (resourceVersion %s, was %s) while search failed over", d, ns, got, still[d])
		}
	}
	searchOnEast := waitFenceOf(t, ctx, east, "search", "fenced", time.Minute, is(fencedEnforced, 0, 0))
	if h := searchOnEast.Status.Holder; h == nil || h.Name != "west" {
		t.Errorf("east's Fence of search: %s", statusYAML(searchOnEast))
	}
	res, err := east.ControlPlane.Kubectl(ctx, nil, "get", "fences")
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("kubectl get fences: %v %s", err, res.Stderr)
	}
	rows := parseTable(strings.Split(strings.TrimSpace(res.Stdout), "\n"))
	for d, want := range map[string]string{"default": "east", "payments": "west", "search": "west"} {
		if rows[d]["HOLDER"] != want {
			t.Errorf("kubectl get fences on east: domain %s holder %q, want %s\n%s", d, rows[d]["HOLDER"], want, res.Stdout)
		}
	}
}

// waitFenceOf polls a cluster's Fence of domain d until ok, and returns it.
func waitFenceOf(t *testing.T, ctx context.Context, c *stack.Cluster, d, what string, timeout time.Duration, ok func(*fencegatev1alpha1.Fence) bool) *fencegatev1alpha1.Fence {
	t.Helper()
	var f fencegatev1alpha1.Fence
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: d}, &f); err != nil {
			return false, nil //nolint:nilerr // not created yet; keep polling
		}
		return ok(&f), nil
	})
	if err != nil {
		t.Fatalf("%s: the Fence of %s never became %s: %v\nlast status: %s", c.Label, d, what, err, statusYAML(&f))
	}
	return &f
}

// componentIn is a Component in namespace ns.
func componentIn(ns, name string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"components.fencegate.dev/v1alpha1","kind":"Component","metadata":{"name":%q,"namespace":%q},"spec":{"enabled":true}}`, name, ns)
}

// dryRunCreateIn asks the cluster to admit a new Component in namespace ns
// without keeping it, and returns kubectl's exit code and error output.
func dryRunCreateIn(t *testing.T, ctx context.Context, c *stack.Cluster, ns, name string) (int, string) {
	t.Helper()
	res, err := c.ControlPlane.Kubectl(ctx, componentIn(ns, name), "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		t.Fatal(err)
	}
	return res.ExitCode, res.Stderr
}

// markedVersion waits until the controller marked the Component and its
// resourceVersion stays put for a second, and returns it.
func markedVersion(t *testing.T, ctx context.Context, c *stack.Cluster, ns, name string) string {
	t.Helper()
	last, since := "", time.Now()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var comp fencegatev1alpha1.Component
		if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &comp); err != nil {
			return false, err
		}
		if comp.ResourceVersion != last || len(comp.Status.Conditions) == 0 {
			last, since = comp.ResourceVersion, time.Now()
			return false, nil
		}
		return time.Since(since) > time.Second, nil
	})
	if err != nil {
		t.Fatalf("%s: %s/%s never settled marked: %v", c.Name, ns, name, err)
	}
	return last
}

func resourceVersion(t *testing.T, ctx context.Context, c *stack.Cluster, ns, name string) string {
	t.Helper()
	var comp fencegatev1alpha1.Component
	if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &comp); err != nil {
		t.Fatalf("%s: get %s/%s: %v", c.Name, ns, name, err)
	}
	return comp.ResourceVersion
}
