package charts

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/internal/webhookcerts"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/proc"
	"github.com/fencegate/fencegate/test/stack"
)

// TestChartsOnAnAPIServer runs the charts against a real kube-apiserver.
// The steps share one control plane and run in order: the dry runs and the
// helm test script need Component requests that no installed webhook
// configuration intercepts, and the real install comes last.
func TestChartsOnAnAPIServer(t *testing.T) {
	h := newHelm(t)
	// The CRD comes from the chart's crds/, applied the way an operator
	// would before the dry runs.
	cp := cluster.StartForTest(t, cluster.Options{Name: "charts", NoCRDs: true})
	ctx := t.Context()

	// The release namespace enforces the "restricted" Pod Security
	// standard and warns about workloads that would break it.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace, Labels: map[string]string{
		"pod-security.kubernetes.io/enforce": "restricted",
		"pod-security.kubernetes.io/warn":    "restricted",
	}}}
	if err := cp.Client.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	stubs, err := os.ReadFile(filepath.Join("testdata", "cert-manager-crds.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	kubectl(t, cp, stubs, "apply", "-f", "-")
	kubectl(t, cp, nil, "apply", "-f", filepath.Join("testdata", "prometheus-operator-crds.yaml"))
	// Grafana's namespace, where ci/monitoring-values.yaml puts the
	// dashboard.
	kubectl(t, cp, []byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: monitoring}\n"), "apply", "-f", "-")
	kubectl(t, cp, nil, "apply", "-f", filepath.Join(h.chartDir(fencegateChart), "crds"))
	kubectl(t, cp, nil, "wait", "--for=condition=Established", "--timeout=30s",
		"crd/issuers.cert-manager.io", "crd/certificates.cert-manager.io", "crd/components.components.fencegate.dev",
		"crd/servicemonitors.monitoring.coreos.com", "crd/prometheusrules.monitoring.coreos.com", "crd/fences.components.fencegate.dev")

	t.Run("server-side dry run of every values file", func(t *testing.T) { testDryRun(t, h, cp) })
	t.Run("the helm test script", func(t *testing.T) { testHelmTestScript(t, h, cp) })
	t.Run("install and upgrade keep the injected certificates", func(t *testing.T) { testInstallUpgrade(t, h, cp) })
	t.Run("admission.kinds leaves fencegate's namespace and kube-system out", func(t *testing.T) { testAdmissionKindsOnTheInstall(t, h, cp) })
	t.Run("fencegate run keeps its Fence with the chart's RBAC, in the chart's priority level", func(t *testing.T) { testRunWithTheChartsRBAC(t, cp) })
	t.Run("the failover ClusterRole lets a group patch this Fence only", func(t *testing.T) { testFailoverRole(t, cp) })
	// Last: it upgrades the release with hold kinds.
	t.Run("hold.kinds lets fencegate watch and patch the held kinds only", func(t *testing.T) { testHoldRole(t, h, cp) })
}

// testRunWithTheChartsRBAC runs a real `fencegate run`, configured as the
// installed Deployment is, as the chart's service account (impersonated)
// and against a real authority: the chart's RBAC must be all it needs to
// create its Fence, keep its Lease and write the Fence's status, and the
// API server's priority and fairness, not fencegate, limits its requests,
// in the chart's priority level.
func testRunWithTheChartsRBAC(t *testing.T, cp *cluster.ControlPlane) {
	ctx := t.Context()
	dir := t.TempDir()
	bin, err := stack.Build(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	auth := authoritytest.Start(t, authoritytest.Options{Quiet: true})
	deploy := &appsv1.Deployment{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fullname}, deploy); err != nil {
		t.Fatal(err)
	}
	container := deploy.Spec.Template.Spec.Containers[0]

	kubeconfig, err := clientcmd.LoadFromFile(cp.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, user := range kubeconfig.AuthInfos {
		user.Impersonate = selfUser
		user.ImpersonateGroups = []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"}
	}
	asChart := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*kubeconfig, asChart); err != nil {
		t.Fatal(err)
	}
	_, pair, err := testcerts.Loopback("webhook CA")
	if err != nil {
		t.Fatal(err)
	}
	certs := filepath.Join(dir, "webhook-certs")
	if err := os.Mkdir(certs, 0o700); err != nil {
		t.Fatal(err)
	}
	if _, _, err := pair.WriteFiles(certs, "tls"); err != nil {
		t.Fatal(err)
	}
	health, err := proc.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	run, err := proc.Start(bin, dir, "fencegate-run",
		"run", "--kubeconfig", asChart, "--cluster-name", "east", "--epoch", "1", "--authority", auth.Addr,
		"--namespace", namespace, "--leader-elect", "--leader-election-id", env(container, "FENCEGATE_LEADER_ELECTION_ID"),
		"--kube-api-qps", env(container, "FENCEGATE_KUBE_API_QPS"),
		"--webhook-certs", "external", "--webhook-cert-dir", certs, "--webhook-address", "127.0.0.1:0",
		"--metrics-address", "0", "--health-address", health, "--log-format", "console")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := run.Stop(30 * time.Second); err != nil {
			t.Error(err)
		}
		logs, err := os.ReadFile(run.LogPath)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(logs)) {
			if strings.Contains(strings.ToLower(line), "forbidden") {
				t.Errorf("fencegate run was refused an API call: %s", line)
			}
		}
		if t.Failed() {
			t.Logf("fencegate run's log:\n%s", logs)
		}
	}()
	if err := run.WaitHealthy(ctx, http.DefaultClient, "http://"+health+"/readyz"); err != nil {
		t.Fatal(err)
	}
	var f fencegatev1alpha1.Fence
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: "default"}, &f); err != nil {
			return false, client.IgnoreNotFound(err)
		}
		return meta.IsStatusConditionTrue(f.Status.Conditions, fencegatev1alpha1.ConditionHolding) &&
			meta.IsStatusConditionTrue(f.Status.Conditions, fencegatev1alpha1.ConditionEnforced) && len(f.Status.Instances) == 1, nil
	})
	if err != nil {
		t.Fatalf("the Fence never said Holding and Enforced with one instance: %v\n%+v", err, f.Status)
	}
	var leases coordinationv1.LeaseList
	if err := cp.Client.List(ctx, &leases, client.InNamespace(namespace), client.MatchingLabels{"fencegate.dev/fence-domain": "default"}); err != nil {
		t.Fatal(err)
	}
	if len(leases.Items) != 1 || ptr.Deref(leases.Items[0].Spec.HolderIdentity, "") != f.Status.Instances[0].Name {
		t.Errorf("instance Leases %v, want the one of instance %s", leases.Items, f.Status.Instances[0].Name)
	}
	wantTheChartsPriorityLevel(t, cp, fullname)
}

// wantTheChartsPriorityLevel checks, once fencegate run has made requests
// as the chart's service account, that the chart's FlowSchema name (the
// release's full name) points at a priority level that exists (its
// Dangling condition is False) and that the API server's priority and
// fairness dispatched requests through both. It returns how many.
func wantTheChartsPriorityLevel(t *testing.T, cp *cluster.ControlPlane, name string) float64 {
	t.Helper()
	ctx := t.Context()
	var fs flowcontrolv1.FlowSchema
	// The API server's flow control writes the condition a moment after
	// it takes in the FlowSchema.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &fs); err != nil {
			return false, err
		}
		for _, c := range fs.Status.Conditions {
			if c.Type == flowcontrolv1.FlowSchemaConditionDangling {
				return c.Status == flowcontrolv1.ConditionFalse, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("the FlowSchema %s never said Dangling False: %v\n%+v", name, err, fs.Status.Conditions)
	}

	const metric = "apiserver_flowcontrol_dispatched_requests_total"
	metrics := kubectl(t, cp, nil, "get", "--raw", "/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(metrics))
	if err != nil {
		t.Fatalf("parse the API server's metrics: %v", err)
	}
	var series []string
	for _, m := range families[metric].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["flow_schema"] == name && labels["priority_level"] == name && m.GetCounter().GetValue() > 0 {
			return m.GetCounter().GetValue()
		}
		series = append(series, fmt.Sprintf("%v %v", labels, m.GetCounter().GetValue()))
	}
	t.Errorf("the API server dispatched no request through FlowSchema and priority level %s; %s has:\n%s", name, metric, strings.Join(series, "\n"))
	return 0
}

// testFailoverRole binds a group to the installed failover ClusterRole and
// asks the API server what its members may do.
func testFailoverRole(t *testing.T, cp *cluster.ControlPlane) {
	kubectl(t, cp, nil, "create", "clusterrolebinding", "oncall-failover", "--clusterrole", fullname+"-failover", "--group", "oncall")
	for _, tc := range []struct {
		verb, resource string
		want           string
	}{
		{"patch", "fences/default", "yes"},
		{"get", "fences/default", "yes"},
		{"watch", "fences/default", "yes"},
		{"patch", "fences/other", "no"},
		{"delete", "fences/default", "no"},
		{"patch", "fences.components.fencegate.dev/default --subresource=status", "no"},
		{"patch", "components", "no"},
	} {
		args := append([]string{"auth", "can-i", tc.verb}, strings.Fields(tc.resource)...)
		res, err := cp.Kubectl(t.Context(), nil, append(args, "--as", "alice", "--as-group", "oncall")...)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(res.Stdout); got != tc.want {
			t.Errorf("can a member of the failover group %s %s? %q, want %q %s", tc.verb, tc.resource, got, tc.want, res.Stderr)
		}
	}
}

func kubectl(t *testing.T, cp *cluster.ControlPlane, stdin []byte, args ...string) string {
	t.Helper()
	res, err := cp.Kubectl(t.Context(), stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 0 {
		t.Fatalf("kubectl %s: exit %d\n%s", strings.Join(args, " "), res.ExitCode, res.Stderr)
	}
	return res.Stdout
}

// testDryRun applies each rendered manifest (CRDs, hooks and tests
// included) with kubectl apply --dry-run=server: the API server validates
// and admits every object, Pod Security included, without storing any.
func testDryRun(t *testing.T, h *helmTool, cp *cluster.ControlPlane) {
	for _, chart := range []string{fencegateChart, authorityChart} {
		for _, values := range h.ciValues(t, chart) {
			t.Run(chart+"/"+filepath.Base(values), func(t *testing.T) {
				r := h.render(t, chart, []string{values})
				res, err := cp.Kubectl(t.Context(), []byte(r.manifest), "apply", "--dry-run=server", "-f", "-")
				if err != nil {
					t.Fatal(err)
				}
				if res.ExitCode != 0 {
					t.Fatalf("the API server refused the manifest:\n%s", res.Stderr)
				}
				if strings.Contains(res.Stderr, "Warning") {
					t.Errorf("the API server warned:\n%s", res.Stderr)
				}
				if n := strings.Count(res.Stdout, "(server dry run)"); n != len(r.objects) {
					t.Errorf("%d objects accepted, %d rendered:\n%s", n, len(r.objects), res.Stdout)
				}
			})
		}
	}
}

// stubWebhook answers AdmissionReviews the way fencegate would in a given
// state, so the helm test script can be run against each answer.
type stubWebhook struct {
	mode  atomic.Value // string
	calls atomic.Int64
}

func (s *stubWebhook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.calls.Add(1)
	mode := s.mode.Load().(string)
	if mode == "error" {
		http.Error(w, "webhook broken", http.StatusInternalServerError)
		return
	}
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true}
	stamp := func(annotations map[string]string) {
		patch, _ := json.Marshal([]map[string]any{{"op": "add", "path": "/metadata/annotations", "value": annotations}})
		resp.Patch, resp.PatchType = patch, ptr.To(admissionv1.PatchTypeJSONPatch)
	}
	switch {
	case r.URL.Path == "/validate" && mode == "deny":
		resp.Allowed = false
		resp.Result = &metav1.Status{Code: http.StatusForbidden, Message: `fencegate: cluster "east" (epoch 7) does not hold the ownership fence of domain "default": cluster "west" holds it at epoch 8.`}
	case r.URL.Path == "/mutate" && mode == "active":
		stamp(map[string]string{"fencegate.dev/epoch": "7", "fencegate.dev/token": "12"})
	case r.URL.Path == "/mutate" && mode == "stale":
		stamp(map[string]string{"fencegate.dev/epoch": "6", "fencegate.dev/token": "11"})
	case r.URL.Path == "/mutate" && mode == "mark":
		stamp(map[string]string{"fencegate.dev/fenced": "true", "fencegate.dev/fenced-by": "west@8"})
	}
	review.Response = resp
	review.Request = nil
	_ = json.NewEncoder(w).Encode(review)
}

// testHelmTestScript runs the script of the chart's helm test Pod with the
// real kubectl against answers a fencegate webhook can give, and checks it
// passes exactly when the answer proves fencegate decided.
func testHelmTestScript(t *testing.T, h *helmTool, cp *cluster.ControlPlane) {
	ctx := t.Context()
	r := h.render(t, fencegateChart, []string{filepath.Join(h.chartDir(fencegateChart), "ci", "defaults-values.yaml")})
	var pod corev1.Pod
	r.get(t, "Pod", fullname+"-test", &pod)
	container := pod.Spec.Containers[0]
	if len(container.Command) != 2 || container.Command[0] != "/shell/sh" || len(container.Args) != 1 {
		t.Fatalf("the test Pod runs %v %v; want /shell/sh -c <script>", container.Command, container.Args)
	}
	script := container.Args[0]
	// In the Pod the shell is busybox's and the only program is kubectl:
	// run the script with a POSIX shell and a PATH that holds kubectl alone,
	// so that any other command it called would fail here too.
	bin := t.TempDir()
	if err := os.Symlink(filepath.Join(cp.Assets, "kubectl"), filepath.Join(bin, "kubectl")); err != nil {
		t.Fatal(err)
	}

	stub := &stubWebhook{}
	stub.mode.Store("active")
	ca, pair, err := testcerts.Loopback("stub webhook CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(pair.CertPEM, pair.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(stub)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	installStubWebhooks(t, cp, srv.URL, ca.CertPEM)

	// The API server reads webhook configurations through an informer:
	// wait until requests reach the stub.
	probe := []byte("apiVersion: components.fencegate.dev/v1alpha1\nkind: Component\nmetadata: {name: probe, namespace: " + namespace + "}\nspec: {enabled: false}\n")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cp.Kubectl(ctx, probe, "apply", "--dry-run=server", "-f", "-")
		return stub.calls.Load() > 0, err
	}); err != nil {
		t.Fatalf("the API server never called the stub webhook: %v", err)
	}

	tests := map[string]struct {
		mode, expect string
		pass         bool
		want         string
	}{
		"active: admitted and stamped with this epoch": {mode: "active", expect: "any", pass: true, want: `PASS: east is active: admitted and stamped fencegate.dev/epoch=7`},
		"active, as required":                          {mode: "active", expect: "active", pass: true, want: "PASS: east is active"},
		"fenced: denied by fencegate":                  {mode: "deny", expect: "any", pass: true, want: `PASS: east is fenced: Error from server`},
		"fenced where active is required":              {mode: "deny", expect: "active", pass: false, want: "FAIL: expected active, but east is fenced"},
		"marked under warn enforcement":                {mode: "mark", expect: "fenced", pass: true, want: "PASS: east is marked"},
		"admitted unstamped: no fencegate decision":    {mode: "admit", expect: "any", pass: false, want: "fencegate's mutating webhook did not answer"},
		"stamped with another epoch: stale pods":       {mode: "stale", expect: "any", pass: false, want: "FAIL: stamped with epoch 6, not this release's epoch 7"},
		"webhook failing":                              {mode: "error", expect: "any", pass: false, want: "FAIL: the dry run failed, and not because of the fence"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			stub.mode.Store(tc.mode)
			cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
			cmd.Env = []string{
				"HOME=" + t.TempDir(),
				"KUBECONFIG=" + cp.Kubeconfig,
				"PATH=" + bin,
				"EXPECT=" + tc.expect,
			}
			for _, e := range container.Env {
				if e.Name != "HOME" && e.Name != "EXPECT" {
					cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
				}
			}
			out, err := cmd.CombinedOutput()
			if passed := err == nil; passed != tc.pass {
				t.Errorf("script passed = %v, want %v; output:\n%s", passed, tc.pass, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("output lacks %q:\n%s", tc.want, out)
			}
		})
	}
}

// installStubWebhooks registers the stub for Components under the webhook
// names the chart uses, and removes the registrations when the test ends.
func installStubWebhooks(t *testing.T, cp *cluster.ControlPlane, url string, caPEM []byte) {
	t.Helper()
	rules := []admissionregistrationv1.RuleWithOperations{{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
		Rule: admissionregistrationv1.Rule{
			APIGroups: []string{"components.fencegate.dev"}, APIVersions: []string{"*"}, Resources: []string{"components"},
		},
	}}
	cc := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url + path), CABundle: caPEM}
	}
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	fail := ptr.To(admissionregistrationv1.Fail)
	objs := []client.Object{
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "stub"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name: "validate.fencegate.dev", ClientConfig: cc("/validate"), Rules: rules,
				SideEffects: none, FailurePolicy: fail, AdmissionReviewVersions: []string{"v1"},
			}},
		},
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "stub"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name: "mutate.fencegate.dev", ClientConfig: cc("/mutate"), Rules: rules,
				SideEffects: none, FailurePolicy: fail, AdmissionReviewVersions: []string{"v1"},
			}},
		},
	}
	for _, obj := range objs {
		if err := cp.Client.Create(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, obj := range objs {
			if err := cp.Client.Delete(context.Background(), obj); err != nil {
				t.Errorf("delete stub webhook: %v", err)
			}
		}
	})
}

// testInstallUpgrade installs both charts for real (no pod runs: the
// control plane has no nodes) and checks what an operator meets: the NOTES;
// fencegate's certificate manager working with exactly the chart's RBAC; and
// an upgrade that raises the epoch, which rolls the pods but leaves the CA
// bundle and the Secret that fencegate wrote alone.
func testInstallUpgrade(t *testing.T, h *helmTool, cp *cluster.ControlPlane) {
	ctx := t.Context()
	h.env = append(h.env, "KUBECONFIG="+cp.Kubeconfig)
	ciValues := func(chart, name string) string { return filepath.Join(h.chartDir(chart), "ci", name) }

	out, err := h.run(ctx, "install", release, h.chartDir(fencegateChart), "--namespace", namespace,
		"--values", ciValues(fencegateChart, "defaults-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"fencegate fence status --authority fence.example.com:7443 --domain default",
		"kubectl get components -A",
		"helm test " + release,
		"--reuse-values --set epoch=8",
		"kubectl -n " + namespace + " edit configmap " + fullname + "-policies",
		"kubectl get fences",
		"fencegate failover --to <this context> --from <the active's context> --wait",
		"ClusterRole\n   " + fullname + "-failover",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("install NOTES lack %q:\n%s", want, out)
		}
	}

	// fencegate's certificate manager, running as the chart's service
	// account: the chart's narrow RBAC must be all it needs to fill the
	// Secret and inject the bundle.
	asChart := runTheChartsCertificateManager(t, cp)
	// The RBAC is narrow indeed: the same identity may not read another
	// Secret.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "other"}}
	if err := cp.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	impersonated, err := client.New(asChart, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := impersonated.Get(ctx, client.ObjectKeyFromObject(other), other); !apierrors.IsForbidden(err) {
		t.Errorf("the chart's service account reads another Secret: %v", err)
	}

	secret := &corev1.Secret{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: webhookSecret}, secret); err != nil {
		t.Fatal(err)
	}
	bundle := secret.Data["ca-bundle.crt"]
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	checkBundles := func(when string) {
		t.Helper()
		for _, obj := range []client.Object{vwc, mwc} {
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: fullname}, obj); err != nil {
				t.Fatal(err)
			}
		}
		for _, w := range vwc.Webhooks {
			if b := w.ClientConfig.CABundle; len(b) == 0 || string(b) != string(bundle) {
				t.Errorf("%s: the validating webhook %s does not carry the Secret's CA bundle", when, w.Name)
			}
		}
		for _, w := range mwc.Webhooks {
			if b := w.ClientConfig.CABundle; len(b) == 0 || string(b) != string(bundle) {
				t.Errorf("%s: the mutating webhook %s does not carry the Secret's CA bundle", when, w.Name)
			}
		}
	}
	checkBundles("after injection")

	if _, err := h.run(ctx, "upgrade", release, h.chartDir(fencegateChart), "--namespace", namespace,
		"--reuse-values", "--set", "epoch=8"); err != nil {
		t.Fatal(err)
	}
	deploy := &appsv1.Deployment{}
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: fullname}, deploy); err != nil {
		t.Fatal(err)
	}
	if got := env(deploy.Spec.Template.Spec.Containers[0], "FENCEGATE_EPOCH"); got != "8" {
		t.Errorf("after the upgrade FENCEGATE_EPOCH = %q, want 8", got)
	}
	checkBundles("after the upgrade")
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: webhookSecret}, secret); err != nil {
		t.Fatal(err)
	}
	if string(secret.Data["ca-bundle.crt"]) != string(bundle) {
		t.Error("the upgrade emptied the webhook Secret fencegate filled")
	}

	out, err = h.run(ctx, "install", "authority", h.chartDir(authorityChart), "--namespace", namespace,
		"--values", ciValues(authorityChart, "embedded-tls-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"authority-fencegate-authority." + namespace + ".svc:7443",
		"One replica only",
		"fencegate fence status --authority",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("authority NOTES lack %q:\n%s", want, out)
		}
	}
}

// runTheChartsCertificateManager runs fencegate's certificate manager,
// configured from the installed Deployment's environment and as the chart's
// service account (whose impersonating config it returns), until it is
// ready: it has filled the Secret and injected the bundle.
func runTheChartsCertificateManager(t *testing.T, cp *cluster.ControlPlane) *rest.Config {
	t.Helper()
	deploy := &appsv1.Deployment{}
	if err := cp.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: fullname}, deploy); err != nil {
		t.Fatal(err)
	}
	container := deploy.Spec.Template.Spec.Containers[0]
	asChart := rest.CopyConfig(cp.Config)
	asChart.Impersonate = rest.ImpersonationConfig{
		UserName: selfUser,
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
	}
	runCertificateManager(t, asChart, webhookcerts.Options{
		Namespace:         namespace,
		SecretName:        env(container, "FENCEGATE_WEBHOOK_SECRET_NAME"),
		ServiceName:       env(container, "FENCEGATE_WEBHOOK_SERVICE_NAME"),
		ValidatingWebhook: env(container, "FENCEGATE_VALIDATING_WEBHOOK_CONFIGURATION"),
		MutatingWebhook:   env(container, "FENCEGATE_MUTATING_WEBHOOK_CONFIGURATION"),
		CertDir:           t.TempDir(),
	})
	return asChart
}

// runCertificateManager runs webhookcerts with cfg until it is ready, then
// stops it.
func runCertificateManager(t *testing.T, cfg *rest.Config, opts webhookcerts.Options) {
	t.Helper()
	mgr, err := manager.New(cfg, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	ready, err := webhookcerts.Add(mgr, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}()
	select {
	case <-ready:
	case <-time.After(30 * time.Second):
		t.Fatal("the certificate manager did not get ready with the chart's RBAC (see its log above)")
	}
}
