package charts

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/test/proc"
	"github.com/fencegate/fencegate/test/stack"
)

// operatorTargetLabels are the labels prometheus-operator puts on every
// series it scrapes through a ServiceMonitor, besides the ones its
// relabelings add.
var operatorTargetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// TestMetricsTheAlertsAndDashboardUseExist runs the real `fencegate run`
// and `fencegate-authority`, makes some traffic, scrapes their /metrics,
// and checks that every metric and label that the charts' alerts and the
// dashboard query is exported: an alert on a metric that does not exist
// never fires, and nothing else would tell.
func TestMetricsTheAlertsAndDashboardUseExist(t *testing.T) {
	h := newHelm(t)
	queries := chartQueries(t, h)
	targetLabels := map[string][]string{
		"run":       append(slices.Clone(operatorTargetLabels), serviceMonitorLabels(t, h, fencegateChart)...),
		"authority": append(slices.Clone(operatorTargetLabels), serviceMonitorLabels(t, h, authorityChart)...),
	}

	ctx := t.Context()
	s := startStack(t, ctx)
	east := s.Cluster("east")
	probe := startSelfSignedProbe(t, ctx, s, east)
	refusing := startRefusingAuthority(t, ctx, s)
	makeTraffic(t, ctx, s, east)

	// Series appear as the traffic reaches them (the controller reconciles
	// after the admission): scrape until everything used is there, or
	// report what is missing.
	endpoints := map[string][]string{
		"run":       {"http://" + east.Metrics + "/metrics", "http://" + probe + "/metrics"},
		"authority": {"http://" + s.AuthorityMetricsAddress() + "/metrics", "http://" + refusing + "/metrics"},
	}
	var problems []string
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		exported := map[string]exportedMetric{}
		for process, urls := range endpoints {
			for _, url := range urls {
				families, err := scrape(ctx, url)
				if err != nil {
					return false, err
				}
				for name, f := range families {
					exported[name] = mergeExported(exported[name], f, targetLabels[process])
				}
			}
		}
		problems = checkQueries(queries, exported)
		return len(problems) == 0, nil
	})
	if err != nil {
		t.Errorf("the alerts and the dashboard use what the processes do not export (%v):\n%s", err, strings.Join(problems, "\n"))
	}
}

// query is one PromQL expression of the charts, and where it comes from.
type query struct {
	where, expr string
}

// chartQueries returns every PromQL expression of the charts: the alerts of
// both charts, and the dashboard's panels and variables.
func chartQueries(t *testing.T, h *helmTool) []query {
	t.Helper()
	var out []query
	for _, chart := range []string{fencegateChart, authorityChart} {
		_, alerts := renderedRules(t, h, chart)
		for _, a := range alerts {
			out = append(out, query{"alert " + a.Alert, a.Expr})
		}
	}
	d := readDashboard(t, h)
	for _, p := range d.Panels {
		for _, target := range p.Targets {
			out = append(out, query{"panel " + p.Title, grafanaToPromQL(target.Expr)})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, _ := v.Query.(map[string]any)["query"].(string)
		m := labelValues.FindStringSubmatch(q)
		if m == nil {
			t.Fatalf("dashboard variable %s: query %q is not label_values(selector, label)", v.Name, q)
		}
		// label_values(selector, label) reads label from the selector's
		// series: the same as grouping them by it.
		out = append(out, query{"variable " + v.Name, fmt.Sprintf("count by (%s) (%s)", m[2], grafanaToPromQL(m[1]))})
	}
	if len(out) == 0 {
		t.Fatal("no queries in the charts")
	}
	return out
}

var (
	labelValues     = regexp.MustCompile(`^label_values\((.+),\s*(\w+)\)$`)
	grafanaInterval = regexp.MustCompile(`\$__\w+`)
	grafanaVariable = regexp.MustCompile(`\$\{?\w+\}?`)
)

// grafanaToPromQL replaces Grafana's variables with what they stand for:
// intervals with one, the cluster and domain variables with "All".
func grafanaToPromQL(expr string) string {
	expr = grafanaInterval.ReplaceAllString(expr, "5m")
	return grafanaVariable.ReplaceAllString(expr, ".*")
}

// serviceMonitorLabels returns the labels a chart's ServiceMonitor sets by
// relabeling.
func serviceMonitorLabels(t *testing.T, h *helmTool, chart string) []string {
	t.Helper()
	r := h.render(t, chart, monitoringValues(h, chart))
	for _, o := range r.objects {
		if o.GetKind() == "ServiceMonitor" {
			var sm serviceMonitor
			r.get(t, "ServiceMonitor", o.GetName(), &sm)
			return slices.Sorted(maps.Keys(sm.targetLabels()))
		}
	}
	t.Fatalf("%s renders no ServiceMonitor", chart)
	return nil
}

// exportedMetric is what a scrape shows of one metric name: every label its
// series have once scraped.
type exportedMetric struct {
	labels map[string]bool
}

// mergeExported adds a scraped family, and the labels the scrape adds to
// it, to what is known of its name.
func mergeExported(e exportedMetric, f *dto.MetricFamily, targetLabels []string) exportedMetric {
	if e.labels == nil {
		e = exportedMetric{labels: map[string]bool{}}
	}
	for _, l := range targetLabels {
		e.labels[l] = true
	}
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			e.labels[l.GetName()] = true
		}
	}
	return e
}

// scrape reads a /metrics endpoint and returns its families under every name
// a query can select them by.
func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse the metrics of %s: %w", url, err)
	}
	out := map[string]*dto.MetricFamily{}
	for name, f := range families {
		out[name] = f
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			withLe := &dto.MetricFamily{Name: f.Name, Type: f.Type}
			for _, m := range f.GetMetric() {
				withLe.Metric = append(withLe.Metric, &dto.Metric{Label: append(slices.Clone(m.GetLabel()), &dto.LabelPair{Name: ptr.To("le")})})
			}
			out[name+"_bucket"] = withLe
			out[name+"_sum"], out[name+"_count"] = f, f
		case dto.MetricType_SUMMARY:
			out[name+"_sum"], out[name+"_count"] = f, f
		}
	}
	return out, nil
}

// checkQueries parses each query and reports every metric it selects that
// is not exported, and every label it matches or groups by that the
// metrics it applies to do not have.
func checkQueries(queries []query, exported map[string]exportedMetric) []string {
	var problems []string
	report := func(q query, format string, args ...any) {
		problems = append(problems, fmt.Sprintf("  %s: %s", q.where, fmt.Sprintf(format, args...)))
	}
	p := parser.NewParser(parser.Options{})
	for _, q := range queries {
		expr, err := p.ParseExpr(q.expr)
		if err != nil {
			report(q, "does not parse: %v", err)
			continue
		}
		// hasLabel reports whether some metric selected under node has the
		// label.
		hasLabel := func(node parser.Node, label string) bool {
			found := false
			parser.Inspect(node, func(n parser.Node, _ []parser.Node) error {
				if vs, ok := n.(*parser.VectorSelector); ok {
					found = found || exported[vs.Name].labels[label]
				}
				return nil
			})
			return found
		}
		parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
			switch n := n.(type) {
			case *parser.VectorSelector:
				if n.Name == "" {
					report(q, "selects series without a metric name: %s", n)
					return nil
				}
				e, ok := exported[n.Name]
				if !ok {
					report(q, "metric %s is not exported", n.Name)
					return nil
				}
				for _, m := range n.LabelMatchers {
					if m.Name != model.MetricNameLabel && !e.labels[m.Name] {
						report(q, "%s has no label %q (it has %v)", n.Name, m.Name, slices.Sorted(maps.Keys(e.labels)))
					}
				}
			case *parser.AggregateExpr:
				for _, l := range n.Grouping {
					if !hasLabel(n.Expr, l) {
						report(q, "groups by %q, which none of the metrics it aggregates has: %s", l, n)
					}
				}
			case *parser.BinaryExpr:
				if n.VectorMatching == nil {
					return nil
				}
				for _, l := range slices.Concat(n.VectorMatching.MatchingLabels, n.VectorMatching.Include) {
					if !hasLabel(n, l) {
						report(q, "matches on %q, which neither side has: %s", l, n)
					}
				}
			}
			return nil
		})
	}
	return problems
}

// startStack runs an authority and cluster "east" as processes.
func startStack(t *testing.T, ctx context.Context) *stack.Stack {
	t.Helper()
	return stack.StartForTest(t, ctx, stack.Options{
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 1}},
		Say:      t.Logf,
	})
}

// startSelfSignedProbe runs a second `fencegate run` for the cluster that
// makes its own webhook certificates, as the chart's default does (the
// stack's own uses external ones), so that the certificate metrics are
// exported too. Its webhook configurations match no object: it serves no
// admission. It returns the address of its /metrics.
func startSelfSignedProbe(t *testing.T, ctx context.Context, s *stack.Stack, c *stack.Cluster) string {
	t.Helper()
	const name = "fencegate-metrics-probe"
	never := &metav1.LabelSelector{MatchLabels: map[string]string{"fencegate.dev/metrics-probe": "never"}}
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule:       admissionregistrationv1.Rule{APIGroups: []string{"components.fencegate.dev"}, APIVersions: []string{"*"}, Resources: []string{"components"}},
	}}
	cc := admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{Namespace: stack.Namespace, Name: name}}
	none, ignore := ptr.To(admissionregistrationv1.SideEffectClassNone), ptr.To(admissionregistrationv1.Ignore)
	for _, obj := range []client.Object{
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: "probe.fencegate.dev", ClientConfig: cc, Rules: rules, ObjectSelector: never,
				SideEffects: none, FailurePolicy: ignore, AdmissionReviewVersions: []string{"v1"},
			}},
		},
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "probe.fencegate.dev", ClientConfig: cc, Rules: rules, ObjectSelector: never,
				SideEffects: none, FailurePolicy: ignore, AdmissionReviewVersions: []string{"v1"},
			}},
		},
	} {
		if err := c.ControlPlane.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	var addrs [3]string
	for i := range addrs {
		var err error
		if addrs[i], err = proc.FreeAddress(); err != nil {
			t.Fatal(err)
		}
	}
	webhook, metrics, health := addrs[0], addrs[1], addrs[2]
	p, err := proc.Start(s.Binary, s.Dir, name, "run",
		"--cluster-name", c.Name,
		"--epoch", fmt.Sprint(c.Epoch),
		"--instance", name,
		"--authority", s.AuthorityAddr,
		"--kubeconfig", c.Kubeconfig,
		"--namespace", stack.Namespace,
		"--webhook-address", webhook,
		"--webhook-cert-dir", t.TempDir(),
		"--webhook-certs", "self-signed",
		"--webhook-secret-name", name,
		"--webhook-service-name", name,
		"--validating-webhook-configuration", name,
		"--mutating-webhook-configuration", name,
		"--metrics-address", metrics,
		"--health-address", health,
		"--log-format", "console")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Errorf("stop the probe: %v (log: %s)", err, p.LogPath)
		}
	})
	if err := p.WaitHealthy(ctx, http.DefaultClient, "http://"+health+"/readyz"); err != nil {
		t.Fatalf("the self-signed fencegate did not get ready (log: %s): %v", p.LogPath, err)
	}
	return metrics
}

// startRefusingAuthority runs a second authority that requires client
// certificates and whose authorization file binds no identity, and calls it
// once with a certificate its CA signed: the refusal brings the
// permission-denied series into being (the stack's authority authorizes
// every caller). It returns the address of its /metrics.
func startRefusingAuthority(t *testing.T, ctx context.Context, s *stack.Stack) string {
	t.Helper()
	dir := t.TempDir()
	ca, serving, err := testcerts.Loopback("refusing authority CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := serving.WriteFiles(dir, "serving")
	if err != nil {
		t.Fatal(err)
	}
	authorization := filepath.Join(dir, "authorization.yaml")
	if err := os.WriteFile(authorization, []byte("clusters: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	listen, err := proc.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := proc.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	p, err := proc.Start(stack.AuthorityBinary(s.Binary), s.Dir, "refusing-authority",
		"--listen", listen,
		"--data-dir", filepath.Join(dir, "data"),
		"--tls-cert", certFile, "--tls-key", keyFile, "--client-ca", caFile,
		"--authorization-file", authorization,
		"--metrics-address", metrics,
		"--log-format", "console")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(30 * time.Second); err != nil {
			t.Errorf("stop the refusing authority: %v (log: %s)", err, p.LogPath)
		}
	})
	if err := p.WaitHealthy(ctx, http.DefaultClient, "http://"+metrics+"/readyz"); err != nil {
		t.Fatalf("the refusing authority did not get ready (log: %s): %v", p.LogPath, err)
	}

	stranger, err := ca.Client("stranger")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(stranger.CertPEM, stranger.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.CertPEM)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: roots, MinVersion: tls.VersionTLS12})
	conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	_, err = fencev1.NewFenceServiceClient(conn).DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 1})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("a caller with no role declared: %v, want PermissionDenied", err)
	}
	return metrics
}

// makeTraffic makes the calls that bring every labelled series into being:
// Components created and tried, a second cluster refused, a release by a
// cluster that does not hold the fence, and a watch of the fence.
func makeTraffic(t *testing.T, ctx context.Context, s *stack.Stack, c *stack.Cluster) {
	t.Helper()
	component := func(name string) []byte {
		return fmt.Appendf(nil, `{"apiVersion":"components.fencegate.dev/v1alpha1","kind":"Component","metadata":{"name":%q,"namespace":"default"},"spec":{"enabled":true}}`, name)
	}
	for _, args := range [][]string{{"apply", "-f", "-"}, {"apply", "--dry-run=server", "-f", "-"}} {
		res, err := c.ControlPlane.Kubectl(ctx, component("metrics"), args...)
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("kubectl %s: %v %s", strings.Join(args, " "), err, res.Stderr)
		}
	}
	west := &fencev1.DeclareClusterEpochRequest{ClusterName: "west", ClusterUid: "uid-west", Epoch: 1}
	if _, err := s.Fence.DeclareClusterEpoch(ctx, west); err == nil {
		t.Error("west was granted the fence that east holds")
	}
	if _, err := s.Fence.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{ClusterUid: "uid-west", Epoch: 1}); err == nil {
		t.Error("west released a fence it does not hold")
	}
	if _, err := s.Fence.GetFence(ctx, &fencev1.GetFenceRequest{}); err != nil {
		t.Fatal(err)
	}
	watch, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := s.Fence.WatchFence(watch, &fencev1.WatchFenceRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("watch: %v", err)
	}
}
