package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/webhook"
)

const (
	// controllerUser is fencegate's controller, as the chart configures it.
	controllerUser = "system:serviceaccount:fencegate-system:fencegate"
	// breakGlassGroup is exempt from the fence.
	breakGlassGroup = "fencegate:break-glass"
)

// Fence states of this test: the control plane is cluster "west".
var (
	westActive = enginetest.Fence(fencestate.Active, "west", 3, "west", 3)
	westFenced = enginetest.Fence(fencestate.Fenced, "west", 3, "east", 7)
)

// The denial a fenced west gives.
const westFencedDenial = `fencegate: cluster "west" (epoch 3) does not hold the ownership fence of domain "default": ` +
	`cluster "east" holds it at epoch 7. Components can only change on the cluster that holds the fence. ` +
	`To fail over to west, run fencegate failover --to west, or raise spec.epoch of the Fence "default" on west above 7 (to 8).`

// admissionWebhooks are the webhook configurations the chart installs,
// scoped to Components. envtest points them at its local serving address;
// it joins host and path with a slash, so the paths carry none.
func admissionWebhooks() *envtest.WebhookInstallOptions {
	none := admissionregistrationv1.SideEffectClassNone
	fail := admissionregistrationv1.Fail
	scope := admissionregistrationv1.NamespacedScope
	rule := func(ops []admissionregistrationv1.OperationType, resources ...string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: ops,
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{fencegatev1alpha1.GroupVersion.Group}, APIVersions: []string{"v1alpha1"},
				Resources: resources, Scope: &scope,
			},
		}}
	}
	service := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{Service: &admissionregistrationv1.ServiceReference{
			Namespace: "fencegate-system", Name: "fencegate-webhook", Path: ptr.To(path),
		}}
	}
	all := []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete}
	return &envtest.WebhookInstallOptions{
		MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{{
			ObjectMeta: metav1.ObjectMeta{Name: "fencegate"},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:                    "mutate.components.fencegate.dev",
				ClientConfig:            service(strings.TrimPrefix(webhook.PathMutate, "/")),
				Rules:                   rule([]admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update}, "components"),
				SideEffects:             &none,
				FailurePolicy:           &fail,
				AdmissionReviewVersions: []string{"v1"},
				TimeoutSeconds:          ptr.To[int32](5),
			}},
		}},
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{{
			ObjectMeta: metav1.ObjectMeta{Name: "fencegate"},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:                    "validate.components.fencegate.dev",
				ClientConfig:            service(strings.TrimPrefix(webhook.PathValidate, "/")),
				Rules:                   rule(all, "components", "components/status"),
				SideEffects:             &none,
				FailurePolicy:           &fail,
				AdmissionReviewVersions: []string{"v1"},
				TimeoutSeconds:          ptr.To[int32](5),
			}},
		}},
	}
}

// decisionLog collects the webhook's decision-log lines.
type decisionLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *decisionLog) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *decisionLog) find(parts ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		found := true
		for _, p := range parts {
			found = found && strings.Contains(line, p)
		}
		if found {
			return true
		}
	}
	return false
}

// warnings collects the warnings the API server returns to a client.
type warnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *warnings) all() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.seen, "\n")
}

// impersonating returns a client acting as user in groups (and
// system:masters, so that no RBAC is needed), recording warnings.
func impersonating(t *testing.T, cp *cluster.ControlPlane, user string, groups []string, w *warnings) client.Client {
	t.Helper()
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: append(groups, "system:masters")}
	if w != nil {
		cfg.WarningHandler = w
	}
	c, err := client.New(cfg, client.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func component(name string, annotations map[string]string) *fencegatev1alpha1.Component {
	return &fencegatev1alpha1.Component{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: fencegatev1alpha1.ComponentSpec{
			Enabled: true,
			Chart:   fencegatev1alpha1.ChartRef{Repository: "https://charts.example.com", Name: name, Version: "1.0.0"},
		},
	}
}

// admissionEnv is a control plane whose API server calls a fencegate
// webhook over TLS.
type admissionEnv struct {
	cp     *cluster.ControlPlane
	engine *engine.Engine
	log    *decisionLog
	// addr is the webhook's address; caPEM the CA of its certificate.
	addr  string
	caPEM []byte
	reg   *prometheus.Registry
}

// startAdmission starts a control plane named west with the webhook
// configurations installed, and the webhook serving them from an engine
// with opts and the config below, holding state.
func startAdmission(ctx context.Context, t *testing.T, opts engine.Options, state fencestate.State) *admissionEnv {
	t.Helper()
	hooks := admissionWebhooks()
	cp := cluster.StartForTest(t, cluster.Options{Name: "west", Webhooks: hooks})

	opts.ConfigFile = filepath.Join(t.TempDir(), "config.yaml")
	config := fmt.Sprintf("enforcement: deny\ncontroller_users: [%q]\nexempt_groups: [%q]\n", controllerUser, breakGlassGroup)
	if err := os.WriteFile(opts.ConfigFile, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.Registerer = reg
	e, err := engine.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.WriteFence(ctx, state); err != nil {
		t.Fatal(err)
	}
	env := &admissionEnv{
		cp: cp, engine: e, log: &decisionLog{}, reg: reg,
		addr:  net.JoinHostPort(hooks.LocalServingHost, fmt.Sprint(hooks.LocalServingPort)),
		caPEM: hooks.LocalServingCAData,
	}
	srv, err := webhook.New(webhook.Options{
		Addr: env.addr, CertDir: hooks.LocalServingCertDir, Engine: e,
		Registerer: reg, Logger: funcr.New(env.log.add, funcr.Options{}),
	})
	if err != nil {
		t.Fatal(err)
	}
	serveCtx, stop := context.WithCancel(ctx)
	served := make(chan error, 2)
	go func() { served <- srv.Start(serveCtx) }()
	go func() { served <- e.Start(serveCtx) }()
	t.Cleanup(func() {
		stop()
		for range 2 {
			if err := <-served; err != nil {
				t.Errorf("webhook: %v", err)
			}
		}
	})
	waitReady(t, env.addr, env.caPEM)
	return env
}

// get fetches a path of the webhook over TLS.
func (env *admissionEnv) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := env.httpClient().Get("https://" + env.addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

func (env *admissionEnv) httpClient() *http.Client {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(env.caPEM)
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	}}
}

// TestAdmission runs the webhook against a real API server, which calls it
// over TLS through Validating- and MutatingWebhookConfigurations, and checks
// what users of the Go client and of kubectl see.
func TestAdmission(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := startAdmission(ctx, t, engine.Options{}, westActive)
	cp, e, log := env.cp, env.engine, env.log

	t.Run("active: create is allowed and stamped", func(t *testing.T) {
		comp := component("billing", map[string]string{"team": "payments"})
		if err := cp.Client.Create(ctx, comp); err != nil {
			t.Fatalf("create: %v", err)
		}
		var got fencegatev1alpha1.Component
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(comp), &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"team": "payments", "fencegate.dev/epoch": "3", "fencegate.dev/token": "1042"}
		for k, v := range want {
			if got.Annotations[k] != v {
				t.Errorf("annotation %s = %q, want %q (all: %v)", k, got.Annotations[k], v, got.Annotations)
			}
		}
	})

	if err := e.WriteFence(ctx, westFenced); err != nil {
		t.Fatal(err)
	}

	t.Run("fenced: create and update are denied with the fence message", func(t *testing.T) {
		err := cp.Client.Create(ctx, component("payments", nil))
		checkDenied(t, "create", err)

		var billing fencegatev1alpha1.Component
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "billing"}, &billing); err != nil {
			t.Fatal(err)
		}
		billing.Spec.Chart.Version = "1.1.0"
		checkDenied(t, "update", cp.Client.Update(ctx, &billing))

		res, err := cp.Kubectl(ctx, []byte(componentYAML), "apply", "-f", "-")
		if err != nil {
			t.Fatal(err)
		}
		if res.ExitCode == 0 || !strings.Contains(res.Stderr, westFencedDenial) {
			t.Errorf("kubectl apply: exit %d, stderr %q; want a failure printing %q", res.ExitCode, res.Stderr, westFencedDenial)
		}
	})

	t.Run("kubectl apply --dry-run=server prints the same denial and persists nothing", func(t *testing.T) {
		// componentYAML's Component is named billing, so it updates the
		// stored one; ledger would be created.
		ledger := strings.ReplaceAll(componentYAML, "billing", "ledger")
		for _, manifest := range []string{componentYAML, ledger} {
			res, err := cp.Kubectl(ctx, []byte(manifest), "apply", "--dry-run=server", "-f", "-")
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitCode == 0 || !strings.Contains(res.Stderr, westFencedDenial) {
				t.Errorf("kubectl apply --dry-run=server: exit %d, stderr %q; want a failure printing %q", res.ExitCode, res.Stderr, westFencedDenial)
			}
		}
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ledger"}, &fencegatev1alpha1.Component{}); !apierrors.IsNotFound(err) {
			t.Errorf("get ledger after the dry run = %v, want NotFound", err)
		}
		var billing fencegatev1alpha1.Component
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "billing"}, &billing); err != nil {
			t.Fatal(err)
		}
		if billing.Spec.Chart.Version != "1.0.0" || billing.Spec.Chart.Repository != "https://charts.example.com" {
			t.Errorf("the dry run changed the stored Component: %+v", billing.Spec.Chart)
		}
		for _, op := range []string{"CREATE", "UPDATE"} {
			if !log.find(`"dryRun"=true`, `"allowed"=false`, `"operation"="`+op+`"`) {
				t.Errorf("no decision-log line marks the dry-run denial of the %s: %q", op, log.lines)
			}
		}
	})

	t.Run("the controller's service account can update status", func(t *testing.T) {
		var billing fencegatev1alpha1.Component
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "billing"}, &billing); err != nil {
			t.Fatal(err)
		}
		billing.Status.Conditions = []metav1.Condition{{
			Type: fencegatev1alpha1.ConditionSourceConflict, Status: metav1.ConditionTrue,
			Reason: fencegatev1alpha1.ReasonClusterFenced, Message: "held", LastTransitionTime: metav1.Now(),
		}}
		checkDenied(t, "status update by an administrator", cp.Client.Status().Update(ctx, billing.DeepCopy()))
		controller := impersonating(t, cp, controllerUser, []string{"system:serviceaccounts"}, nil)
		if err := controller.Status().Update(ctx, &billing); err != nil {
			t.Fatalf("status update by the controller: %v", err)
		}
	})

	t.Run("an exempt group is allowed with a warning and the change is marked", func(t *testing.T) {
		w := &warnings{}
		oncall := impersonating(t, cp, "oncall@example.com", []string{breakGlassGroup}, w)
		comp := component("hotfix", nil)
		if err := oncall.Create(ctx, comp); err != nil {
			t.Fatalf("create by an exempt group: %v", err)
		}
		wantWarning := `fencegate: admitted because group "fencegate:break-glass" is exempt: cluster "west" (epoch 3) does not hold the ownership fence`
		if !strings.Contains(w.all(), wantWarning) {
			t.Errorf("warnings %q do not contain %q", w.all(), wantWarning)
		}
		var got fencegatev1alpha1.Component
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(comp), &got); err != nil {
			t.Fatal(err)
		}
		if got.Annotations["fencegate.dev/fenced"] != "true" || got.Annotations["fencegate.dev/fenced-by"] != "east@7" {
			t.Errorf("annotations = %v, want the fence marks", got.Annotations)
		}

		res, err := cp.Kubectl(ctx, nil, "--as", "oncall@example.com", "--as-group", breakGlassGroup, "--as-group", "system:masters",
			"annotate", "component", "hotfix", "-n", "default", "note=urgent")
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("kubectl annotate as an exempt group: %v exit %d: %s", err, res.ExitCode, res.Stderr)
		}
		if !strings.Contains(res.Stderr, "Warning: "+wantWarning) {
			t.Errorf("kubectl printed %q, want the warning %q", res.Stderr, wantWarning)
		}
	})

	t.Run("delete is allowed and kubectl prints the warning", func(t *testing.T) {
		res, err := cp.Kubectl(ctx, nil, "delete", "component", "billing", "-n", "default")
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("kubectl delete: %v exit %d: %s", err, res.ExitCode, res.Stderr)
		}
		want := `Warning: fencegate: this delete removes the Component from cluster "west" only, which does not hold the ownership fence of domain "default" (cluster "east" holds it at epoch 7)`
		if !strings.Contains(res.Stderr, want) {
			t.Errorf("kubectl delete printed %q, want %q", res.Stderr, want)
		}
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "billing"}, &fencegatev1alpha1.Component{}); !apierrors.IsNotFound(err) {
			t.Errorf("get after delete = %v, want NotFound", err)
		}
	})

	if err := e.WriteFence(ctx, westActive); err != nil {
		t.Fatal(err)
	}

	t.Run("active again: an update replaces the fence marks with the stamps", func(t *testing.T) {
		var hotfix fencegatev1alpha1.Component
		if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "hotfix"}, &hotfix); err != nil {
			t.Fatal(err)
		}
		hotfix.Spec.Chart.Version = "1.0.1"
		if err := cp.Client.Update(ctx, &hotfix); err != nil {
			t.Fatalf("update: %v", err)
		}
		want := map[string]string{"note": "urgent", "fencegate.dev/epoch": "3", "fencegate.dev/token": "1042"}
		for k, v := range want {
			if hotfix.Annotations[k] != v {
				t.Errorf("annotation %s = %q, want %q (all: %v)", k, hotfix.Annotations[k], v, hotfix.Annotations)
			}
		}
		for _, k := range []string{"fencegate.dev/fenced", "fencegate.dev/fenced-by"} {
			if _, ok := hotfix.Annotations[k]; ok {
				t.Errorf("annotation %s survived an update admitted by the holder: %v", k, hotfix.Annotations)
			}
		}
	})
}

// checkDenied checks that err is the webhook's denial of a fenced west.
func checkDenied(t *testing.T, what string, err error) {
	t.Helper()
	if !apierrors.IsForbidden(err) {
		t.Errorf("%s: error = %v, want Forbidden", what, err)
		return
	}
	msg := err.Error()
	// The mutating webhook runs first and denies what validation would;
	// status updates reach only the validating one.
	mutate := strings.Contains(msg, `admission webhook "mutate.components.fencegate.dev" denied the request: `+westFencedDenial)
	validate := strings.Contains(msg, `admission webhook "validate.components.fencegate.dev" denied the request: `+westFencedDenial)
	if !mutate && !validate {
		t.Errorf("%s: error %q does not carry the fence message %q", what, msg, westFencedDenial)
	}
}

// waitReady polls the webhook's policy status over TLS until it answers
// 200: the webhook serves (the engine holds a fence state before it starts).
func waitReady(t *testing.T, addr string, caPEM []byte) {
	t.Helper()
	env := &admissionEnv{addr: addr, caPEM: caPEM}
	httpClient := env.httpClient()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := httpClient.Get("https://" + addr + webhook.PathPolicyStatus)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the webhook at %s is not ready: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
