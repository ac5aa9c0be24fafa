package charts

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/fencegate/fencegate/failover"
)

// monitoringObjects are the objects the monitoring values add, as kind/name
// for release "fg".
var monitoringObjects = map[string][]string{
	fencegateChart: {"ServiceMonitor/" + fullname, "PrometheusRule/" + fullname, "NetworkPolicy/" + fullname, "ConfigMap/" + fullname + "-dashboards"},
	authorityChart: {"ServiceMonitor/" + authorityName, "PrometheusRule/" + authorityName, "NetworkPolicy/" + authorityName, "ConfigMap/" + authorityName + "-dashboards"},
}

// baseValues are the values files the monitoring values are tested on top
// of: the least each chart needs.
func baseValues(h *helmTool, chart string) string {
	if chart == fencegateChart {
		return filepath.Join(h.chartDir(chart), "ci", "defaults-values.yaml")
	}
	return filepath.Join(h.chartDir(chart), "ci", "embedded-tls-values.yaml")
}

func monitoringValues(h *helmTool, chart string) []string {
	return []string{filepath.Join(h.chartDir(chart), "ci", "monitoring-values.yaml")}
}

func TestMonitoringIsOffByDefault(t *testing.T) {
	h := newHelm(t)
	for _, chart := range []string{fencegateChart, authorityChart} {
		t.Run(chart, func(t *testing.T) {
			r := h.render(t, chart, []string{baseValues(h, chart)})
			for _, name := range monitoringObjects[chart] {
				if slices.Contains(r.names(), name) {
					t.Errorf("%s is rendered without being asked for", name)
				}
			}
			on := h.render(t, chart, monitoringValues(h, chart))
			for _, name := range monitoringObjects[chart] {
				if !slices.Contains(on.names(), name) {
					t.Errorf("%s is not rendered with ci/monitoring-values.yaml; rendered: %v", name, on.names())
				}
			}
		})
	}
}

// serviceMonitor is the part of a ServiceMonitor the tests read.
type serviceMonitor struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port        string         `json:"port"`
			Scheme      string         `json:"scheme"`
			Interval    string         `json:"interval"`
			TLSConfig   map[string]any `json:"tlsConfig"`
			HonorLabels bool           `json:"honorLabels"`
			Relabelings []struct {
				Action      string `json:"action"`
				TargetLabel string `json:"targetLabel"`
				Replacement string `json:"replacement"`
			} `json:"relabelings"`
			MetricRelabelings []map[string]any `json:"metricRelabelings"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// targetLabels are the labels a ServiceMonitor's relabelings set to fixed
// values.
func (sm serviceMonitor) targetLabels() map[string]string {
	out := map[string]string{}
	for _, e := range sm.Spec.Endpoints {
		for _, r := range e.Relabelings {
			if r.Action == "replace" && r.TargetLabel != "" {
				out[r.TargetLabel] = r.Replacement
			}
		}
	}
	return out
}

// scrapedService returns the one Service the ServiceMonitor scrapes: it
// carries the selected labels and a port the endpoint names.
func scrapedService(t *testing.T, r rendered, sm serviceMonitor) corev1.Service {
	t.Helper()
	var found []corev1.Service
	for _, o := range r.objects {
		if o.GetKind() != "Service" {
			continue
		}
		var svc corev1.Service
		r.get(t, "Service", o.GetName(), &svc)
		if !isSubset(sm.Spec.Selector.MatchLabels, svc.Labels) || !slices.Contains(sm.Spec.NamespaceSelector.MatchNames, svc.Namespace) {
			continue
		}
		for _, p := range svc.Spec.Ports {
			if len(sm.Spec.Endpoints) > 0 && p.Name == sm.Spec.Endpoints[0].Port {
				found = append(found, svc)
			}
		}
	}
	if len(found) != 1 {
		t.Fatalf("the ServiceMonitor scrapes %d Services, want 1: %+v", len(found), found)
	}
	return found[0]
}

func isSubset(sub, of map[string]string) bool {
	for k, v := range sub {
		if of[k] != v {
			return false
		}
	}
	return len(sub) > 0
}

func TestMonitoringObjects(t *testing.T) {
	h := newHelm(t)
	tests := map[string]struct {
		chart, name, metricsService string
		check                       func(t *testing.T, r rendered, sm serviceMonitor, np networkingv1.NetworkPolicy)
	}{
		"fencegate": {
			chart: fencegateChart, name: fullname, metricsService: fullname + "-metrics",
			check: func(t *testing.T, r rendered, sm serviceMonitor, np networkingv1.NetworkPolicy) {
				if got, want := sm.targetLabels(), map[string]string{"cluster": "east", "domain": "default"}; !maps.Equal(got, want) {
					t.Errorf("relabelings set %v, want %v: the alerts and the dashboard group by them", got, want)
				}
				e := sm.Spec.Endpoints[0]
				if !e.HonorLabels {
					t.Error("honorLabels is off: a series' own domain would be renamed exported_domain by the release's")
				}
				if e.Scheme != "https" || e.Interval != "15s" || e.TLSConfig["serverName"] != "fg-fencegate-metrics.fencegate-system.svc" || len(e.MetricRelabelings) != 1 {
					t.Errorf("endpoint %+v, want the values' scheme, interval, TLS settings and metric relabeling", e)
				}
				var deploy appsv1.Deployment
				r.get(t, "Deployment", fullname, &deploy)
				if pods := deploy.Spec.Template.Labels; !isSubset(np.Spec.PodSelector.MatchLabels, pods) {
					t.Errorf("the NetworkPolicy selects %v, not fencegate's pods %v", np.Spec.PodSelector.MatchLabels, pods)
				}
				rules := ingressByPort(np)
				if from := rules["webhook"]; len(from) != 1 || from[0].IPBlock == nil || from[0].IPBlock.CIDR != "10.0.0.0/24" {
					t.Errorf("webhook ingress from %+v, want the API server's 10.0.0.0/24", from)
				}
				if from := rules["metrics"]; len(from) != 1 || from[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
					t.Errorf("metrics ingress from %+v, want the monitoring namespace", from)
				}
				if len(rules) != 2 {
					t.Errorf("ingress opens ports %v, want only webhook and metrics", slices.Sorted(maps.Keys(rules)))
				}
			},
		},
		"fencegate-authority": {
			chart: authorityChart, name: authorityName, metricsService: authorityName + "-headless",
			check: func(t *testing.T, r rendered, sm serviceMonitor, np networkingv1.NetworkPolicy) {
				// Its series carry the domain they are about; a fixed one
				// from the scrape would rename theirs.
				if got := sm.targetLabels(); len(got) != 0 {
					t.Errorf("relabelings set %v on the authority's series, want none", got)
				}
				var sts appsv1.StatefulSet
				r.get(t, "StatefulSet", authorityName, &sts)
				if pods := sts.Spec.Template.Labels; !isSubset(np.Spec.PodSelector.MatchLabels, pods) {
					t.Errorf("the NetworkPolicy selects %v, not the authority's pods %v", np.Spec.PodSelector.MatchLabels, pods)
				}
				rules := ingressByPort(np)
				var cidrs []string
				selectors := 0
				for _, peer := range rules["grpc"] {
					if peer.IPBlock != nil {
						cidrs = append(cidrs, peer.IPBlock.CIDR)
					} else if peer.NamespaceSelector != nil {
						selectors++
					}
				}
				if !slices.Equal(cidrs, []string{"203.0.113.0/24", "198.51.100.0/24"}) || selectors != 1 {
					t.Errorf("gRPC ingress from CIDRs %v and %d selectors, want the clusters' two ranges and one selector", cidrs, selectors)
				}
				if len(rules["metrics"]) != 1 || len(rules) != 2 {
					t.Errorf("ingress %v, want gRPC and metrics only", rules)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := h.render(t, tc.chart, monitoringValues(h, tc.chart))
			var sm serviceMonitor
			r.get(t, "ServiceMonitor", tc.name, &sm)
			if sm.Metadata.Labels["release"] != "kube-prometheus-stack" {
				t.Errorf("ServiceMonitor labels %v lack the values' release label", sm.Metadata.Labels)
			}
			if svc := scrapedService(t, r, sm); svc.Name != tc.metricsService {
				t.Errorf("the ServiceMonitor scrapes Service %s, want %s", svc.Name, tc.metricsService)
			}
			var np networkingv1.NetworkPolicy
			r.get(t, "NetworkPolicy", tc.name, &np)
			if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
				t.Errorf("policyTypes %v, want Ingress only: the pods must reach the API server and the authority", np.Spec.PolicyTypes)
			}
			checkPortsExist(t, r, np)
			tc.check(t, r, sm, np)

			var rule unstructured.Unstructured
			r.get(t, "PrometheusRule", tc.name, &rule.Object)
			if rule.GetLabels()["release"] != "kube-prometheus-stack" {
				t.Errorf("PrometheusRule labels %v lack the values' release label", rule.GetLabels())
			}
			for _, a := range alertsOf(t, rule.Object) {
				if a.Labels["team"] != "platform" || a.Labels["severity"] == "" {
					t.Errorf("alert %s has labels %v, want a severity and the values' team", a.Alert, a.Labels)
				}
			}
			checkDashboardConfigMap(t, h, r, tc.name+"-dashboards")
		})
	}
}

// ingressByPort maps each port an ingress rule opens to the peers it
// admits.
func ingressByPort(np networkingv1.NetworkPolicy) map[string][]networkingv1.NetworkPolicyPeer {
	out := map[string][]networkingv1.NetworkPolicyPeer{}
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			out[p.Port.String()] = append(out[p.Port.String()], rule.From...)
		}
	}
	return out
}

// checkPortsExist checks that every port a NetworkPolicy names is a port of
// the pods it selects.
func checkPortsExist(t *testing.T, r rendered, np networkingv1.NetworkPolicy) {
	t.Helper()
	var ports []string
	for _, o := range r.objects {
		if o.GetKind() != "Deployment" && o.GetKind() != "StatefulSet" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		for _, c := range containers {
			cps, _, _ := unstructured.NestedSlice(c.(map[string]any), "ports")
			for _, p := range cps {
				ports = append(ports, p.(map[string]any)["name"].(string))
			}
		}
	}
	for port := range ingressByPort(np) {
		if !slices.Contains(ports, port) {
			t.Errorf("the NetworkPolicy opens port %q, which no container has (%v)", port, ports)
		}
	}
}

// checkDashboardConfigMap checks the dashboard ConfigMap a chart renders
// with ci/monitoring-values.yaml.
func checkDashboardConfigMap(t *testing.T, h *helmTool, r rendered, name string) {
	t.Helper()
	var cm corev1.ConfigMap
	r.get(t, "ConfigMap", name, &cm)
	if cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard: \"1\", which Grafana's sidecar looks for", cm.Labels)
	}
	file, err := os.ReadFile(filepath.Join(h.chartDir(fencegateChart), "dashboards", "fencegate.json"))
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["fencegate.json"]; got != string(file) {
		t.Errorf("the ConfigMap's fencegate.json differs from charts/fencegate/dashboards/fencegate.json (%d bytes, want %d)", len(got), len(file))
	}
}

// dashboard is the part of a Grafana dashboard the tests read.
type dashboard struct {
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Type    string `json:"type"`
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T, h *helmTool) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(h.chartDir(fencegateChart), "dashboards", "fencegate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboards/fencegate.json: %v", err)
	}
	return d
}

// TestDashboard checks the dashboard's shape: its variables, and a panel
// for each thing an operator comes to see, by the metric it must query. That every metric and label it queries exists is
// TestMetricsTheAlertsAndDashboardUseExist's.
func TestDashboard(t *testing.T) {
	d := readDashboard(t, newHelm(t))
	if d.UID != "fencegate" {
		t.Errorf("uid %q, want fencegate: links to the dashboard use it", d.UID)
	}
	var vars []string
	for _, v := range d.Templating.List {
		vars = append(vars, v.Name)
	}
	if !slices.Equal(vars, []string{"datasource", "cluster", "domain"}) {
		t.Errorf("variables %v, want datasource, cluster and domain", vars)
	}
	wants := map[string]string{
		"each cluster's fence status over time": "fencegate_fence_status",
		"the holder":                            "fencegate_fence_holder_epoch",
		"the token":                             "fencegate_fence_token",
		"transitions":                           "fencegate_fence_transitions_total",
		"declaration results":                   "fencegate_fence_declarations_total",
		"declaration latency":                   "fencegate_fence_declaration_duration_seconds_bucket",
		"admission decisions by result":         "fencegate_admission_decisions_total",
		"admission latency percentiles":         "fencegate_admission_duration_seconds_bucket",
		"the policy revision":                   "fencegate_policy_revision_info",
		"policy reloads":                        "fencegate_policy_reloads_total",
		"Components held":                       "fencegate_components_held",
		"the authority's RPCs":                  "fencegate_authority_grpc_server_handled_total",
		"the authority's RPC latency":           "fencegate_authority_grpc_server_handling_seconds_bucket",
	}
	for what, metric := range wants {
		found := false
		for _, p := range d.Panels {
			for _, target := range p.Targets {
				found = found || strings.Contains(target.Expr, metric)
			}
		}
		if !found {
			t.Errorf("no panel shows %s (a query of %s)", what, metric)
		}
	}
}

// alertRule is one alerting rule of a rendered PrometheusRule.
type alertRule struct {
	Alert       string            `json:"alert"`
	Expr        string            `json:"expr"`
	For         string            `json:"for"`
	Labels      map[string]string `json:"labels"`
	Annotations map[string]string `json:"annotations"`
}

// alertsOf returns the alerting rules of a PrometheusRule object.
func alertsOf(t *testing.T, obj map[string]any) []alertRule {
	t.Helper()
	var rule struct {
		Spec struct {
			Groups []struct {
				Rules []alertRule `json:"rules"`
			} `json:"groups"`
		} `json:"spec"`
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &rule); err != nil {
		t.Fatal(err)
	}
	var out []alertRule
	for _, g := range rule.Spec.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// renderedRules renders a chart with its alerts on and the default
// thresholds, and returns the PrometheusRule's groups as a Prometheus rule
// file, and its alerts.
func renderedRules(t *testing.T, h *helmTool, chart string) ([]byte, []alertRule) {
	t.Helper()
	r := h.render(t, chart, []string{baseValues(h, chart)}, "--set", "metrics.prometheusRule.enabled=true")
	for _, o := range r.objects {
		if o.GetKind() != "PrometheusRule" {
			continue
		}
		groups, _, err := unstructured.NestedSlice(o.Object, "spec", "groups")
		if err != nil || len(groups) == 0 {
			t.Fatalf("PrometheusRule %s has no groups: %v", o.GetName(), err)
		}
		file, err := yaml.Marshal(map[string]any{"groups": groups})
		if err != nil {
			t.Fatal(err)
		}
		return file, alertsOf(t, o.Object)
	}
	t.Fatalf("no PrometheusRule rendered; rendered: %v", r.names())
	return nil, nil
}

// promtool runs the pinned promtool in dir and fails the test with its
// output when it fails.
func promtool(t *testing.T, h *helmTool, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, toolPath(t, h.root, "promtool"), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestAlertRules checks the rules each chart renders with promtool, and
// runs their unit tests (testdata/alerts/<chart>.yaml), which must make
// every alert fire and then resolve.
func TestAlertRules(t *testing.T) {
	h := newHelm(t)
	for _, chart := range []string{fencegateChart, authorityChart} {
		t.Run(chart, func(t *testing.T) {
			rules, alerts := renderedRules(t, h, chart)
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), rules, 0o600); err != nil {
				t.Fatal(err)
			}
			promtool(t, h, dir, "check", "rules", "--lint=all", "--lint-fatal", "rules.yaml")

			tests, err := os.ReadFile(filepath.Join("testdata", "alerts", chart+".yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), tests, 0o600); err != nil {
				t.Fatal(err)
			}
			promtool(t, h, dir, "test", "rules", "tests.yaml")

			fires, resolves, err := alertCoverage(tests)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range alerts {
				if !fires[a.Alert] {
					t.Errorf("no unit test in testdata/alerts/%s.yaml makes %s fire", chart, a.Alert)
				}
				if !resolves[a.Alert] {
					t.Errorf("no unit test in testdata/alerts/%s.yaml makes %s resolve after it fired", chart, a.Alert)
				}
			}
		})
	}
}

// alertCoverage reads a promtool unit test file and reports which alerts
// one of its tests expects firing, and which it then expects resolved at a
// later time of the same test.
func alertCoverage(file []byte) (fires, resolves map[string]bool, err error) {
	var tf struct {
		Tests []struct {
			AlertRuleTest []struct {
				EvalTime  string `json:"eval_time"`
				Alertname string `json:"alertname"`
				ExpAlerts []any  `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		} `json:"tests"`
	}
	if err := yaml.Unmarshal(file, &tf); err != nil {
		return nil, nil, fmt.Errorf("alert unit tests: %w", err)
	}
	fires, resolves = map[string]bool{}, map[string]bool{}
	for _, test := range tf.Tests {
		firedAt := map[string]time.Duration{}
		for _, c := range test.AlertRuleTest {
			at, err := time.ParseDuration(c.EvalTime)
			if err != nil {
				return nil, nil, fmt.Errorf("eval_time %q of %s: %w", c.EvalTime, c.Alertname, err)
			}
			if len(c.ExpAlerts) > 0 {
				fires[c.Alertname] = true
				if first, ok := firedAt[c.Alertname]; !ok || at < first {
					firedAt[c.Alertname] = at
				}
			}
		}
		for _, c := range test.AlertRuleTest {
			at, _ := time.ParseDuration(c.EvalTime)
			if first, ok := firedAt[c.Alertname]; ok && len(c.ExpAlerts) == 0 && at > first {
				resolves[c.Alertname] = true
			}
		}
	}
	return fires, resolves, nil
}

// runbookTitles are the alerts whose runbook section is not titled after
// the alert, because a command's message names the section by its title:
// FencegateNotQuiesced's is the one `fencegate failover --wait` points at
// when the old holder has not quiesced.
func runbookTitles(t *testing.T) map[string]string {
	t.Helper()
	msg := (&failover.QuiesceTimeoutError{}).Error()
	m := regexp.MustCompile(`see the runbook, "([^"]+)"`).FindStringSubmatch(msg)
	if m == nil {
		t.Fatalf("failover.QuiesceTimeoutError names no runbook section any more: %s", msg)
	}
	return map[string]string{"FencegateNotQuiesced": m[1]}
}

// githubAnchor is the anchor GitHub gives a Markdown heading: in lower case,
// spaces as hyphens, punctuation but hyphens and underscores left out.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestRunbookCoversEveryAlert: every alert links its own section of
// docs/runbook.md, titled after the alert (or, for runbookTitles, titled as
// a command names it, and naming the alert), and every section there
// belongs to an alert.
func TestRunbookCoversEveryAlert(t *testing.T) {
	h := newHelm(t)
	f, err := os.Open(filepath.Join(h.root, "docs", "runbook.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	// Each section's text, by its title.
	sections := map[string]string{}
	current := ""
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if name, ok := strings.CutPrefix(scanner.Text(), "## "); ok {
			current = name
			sections[name] = ""
		} else if current != "" {
			sections[current] += scanner.Text() + "\n"
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	titles := runbookTitles(t)
	// The alert of each section, by its title.
	linked := map[string]string{}
	for _, chart := range []string{fencegateChart, authorityChart} {
		_, alerts := renderedRules(t, h, chart)
		for _, a := range alerts {
			title, custom := titles[a.Alert]
			if !custom {
				title = a.Alert
			}
			if other, ok := linked[title]; ok {
				t.Errorf("%s and %s share the section %q", other, a.Alert, title)
			}
			linked[title] = a.Alert
			text, ok := sections[title]
			switch {
			case !ok:
				t.Errorf("docs/runbook.md has no section \"## %s\" for %s", title, a.Alert)
			case custom && !strings.Contains(text, a.Alert):
				t.Errorf("docs/runbook.md's section %q does not name its alert %s: a search for the alert would not find it", title, a.Alert)
			}
			want := "https://github.com/fencegate/fencegate/blob/main/docs/runbook.md#" + githubAnchor(title)
			if got := a.Annotations["runbook_url"]; got != want {
				t.Errorf("%s: runbook_url %q, want %q (the anchor of its section)", a.Alert, got, want)
			}
			for _, key := range []string{"summary", "description"} {
				if a.Annotations[key] == "" {
					t.Errorf("%s has no %s", a.Alert, key)
				}
			}
		}
	}
	for alert, title := range titles {
		if linked[title] != alert {
			t.Errorf("no alert %s links the section %q", alert, title)
		}
	}
	for name := range sections {
		if _, ok := linked[name]; !ok {
			t.Errorf("docs/runbook.md has a section %q for no alert", name)
		}
	}
}

func TestMonitoringValuesAreChecked(t *testing.T) {
	h := newHelm(t)
	tests := map[string]struct {
		chart string
		set   []string
		want  string
	}{
		"scrape scheme":             {fencegateChart, []string{"metrics.serviceMonitor.scheme=ftp"}, "at '/metrics/serviceMonitor/scheme'"},
		"scrape interval":           {fencegateChart, []string{"metrics.serviceMonitor.interval=30 seconds"}, "at '/metrics/serviceMonitor/interval'"},
		"misspelt alert":            {fencegateChart, []string{"metrics.prometheusRule.alerts.fenceUnkown.for=1m"}, "additional properties 'fenceUnkown' not allowed"},
		"error ratio above 1":       {fencegateChart, []string{"metrics.prometheusRule.alerts.admissionErrors.ratio=2"}, "at '/metrics/prometheusRule/alerts/admissionErrors/ratio'"},
		"error ratio not a number":  {fencegateChart, []string{"metrics.prometheusRule.alerts.admissionErrors.ratio=1%"}, "'1%' does not match pattern"},
		"unreachable after, in ms":  {fencegateChart, []string{"metrics.prometheusRule.alerts.authorityUnreachable.after=500ms"}, "at '/metrics/prometheusRule/alerts/authorityUnreachable/after'"},
		"severity":                  {fencegateChart, []string{"metrics.prometheusRule.alerts.fenceUnknown.severity=page"}, "at '/metrics/prometheusRule/alerts/fenceUnknown/severity'"},
		"runbook with an anchor":    {fencegateChart, []string{"metrics.prometheusRule.runbookURL=https://wiki.example.com/fencegate#alerts"}, "at '/metrics/prometheusRule/runbookURL'"},
		"certificate days":          {fencegateChart, []string{"metrics.prometheusRule.alerts.webhookCertificateExpiry.days=0"}, "at '/metrics/prometheusRule/alerts/webhookCertificateExpiry/days'"},
		"not quiesced for":          {fencegateChart, []string{"metrics.prometheusRule.alerts.notQuiesced.for=10 minutes"}, "at '/metrics/prometheusRule/alerts/notQuiesced/for'"},
		"authority grants":          {authorityChart, []string{"metrics.prometheusRule.alerts.fenceFlapping.grants=0"}, "at '/metrics/prometheusRule/alerts/fenceFlapping/grants'"},
		"client CIDR":               {authorityChart, []string{"networkPolicy.clients.cidrs={east.example.com}"}, "at '/networkPolicy/clients/cidrs/0'"},
		"network policy, no client": {authorityChart, []string{"networkPolicy.enabled=true"}, "networkPolicy.enabled needs networkPolicy.clients.cidrs"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var args []string
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			_, err := h.template(t.Context(), tc.chart, []string{baseValues(h, tc.chart)}, args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("helm template error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
