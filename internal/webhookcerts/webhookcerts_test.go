package webhookcerts_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/internal/tlsutil"
	"github.com/fencegate/fencegate/internal/webhookcerts"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/testrun"
)

const (
	namespace = "fencegate"
	service   = "fencegate-webhook"
	// serverName is the name the API server dials for the Service.
	serverName = service + "." + namespace + ".svc"

	caValidity   = 10 * time.Hour
	certValidity = 8 * time.Hour
)

// certState is what one converged moment looks like from outside: the
// Secret's CA, the bundle both configurations carry, and the certificate a
// TLS client is actually served.
type certState struct {
	ca      *x509.Certificate
	bundle  []*x509.Certificate
	serving *x509.Certificate
}

// env is one certificate manager on the shared control plane.
type env struct {
	cp       *cluster.ControlPlane
	clock    *clocktesting.FakeClock
	opts     webhookcerts.Options
	ready    <-chan struct{}
	registry *prometheus.Registry
	server   string // address of the TLS server that serves CertDir
}

func TestCertificatesOnAControlPlane(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "webhookcerts", NoCRDs: true})
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}); err != nil {
		t.Fatal(err)
	}

	type step struct {
		name string
		// do changes the world: moves the clock, breaks an object.
		do func(ctx context.Context, t *testing.T, e *env, now certState)
		// want checks the converged state after do; it is polled until it
		// passes.
		want func(before, after certState) error
	}
	sameCA := func(before, after certState) error {
		if !after.ca.Equal(before.ca) {
			return errors.New("the CA changed")
		}
		return nil
	}
	advance := func(to func(s certState) time.Time) func(context.Context, *testing.T, *env, certState) {
		return func(_ context.Context, _ *testing.T, e *env, s certState) {
			e.clock.SetTime(to(s).Add(time.Second))
		}
	}

	tests := map[string]struct {
		// before prepares the cluster before the manager starts.
		before func(ctx context.Context, t *testing.T, e *env)
		// configsLater creates the webhook configurations only after the
		// manager has written the certificates.
		configsLater bool
		steps        []step
	}{
		"first start creates the Secret, writes the files and injects the bundle": {},
		"readiness waits for the webhook configurations to exist":                 {configsLater: true},
		"a Secret created empty by the chart is filled": {
			before: func(ctx context.Context, t *testing.T, e *env) {
				empty := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: e.opts.SecretName}}
				if err := e.cp.Client.Create(ctx, empty); err != nil {
					t.Fatal(err)
				}
			},
		},
		"the serving certificate is renewed before it expires, by the same CA": {
			steps: []step{{
				name: "past two thirds of the serving certificate's life",
				do:   advance(func(s certState) time.Time { return webhookcerts.RenewalTime(s.serving) }),
				want: func(before, after certState) error {
					if after.serving.Equal(before.serving) {
						return errors.New("the serving certificate was not renewed")
					}
					return sameCA(before, after)
				},
			}},
		},
		"a CA rotation keeps every served certificate verifiable": {
			steps: []step{
				{
					name: "serving certificate renewed once",
					do:   advance(func(s certState) time.Time { return webhookcerts.RenewalTime(s.serving) }),
					want: func(before, after certState) error {
						if after.serving.Equal(before.serving) {
							return errors.New("the serving certificate was not renewed")
						}
						return sameCA(before, after)
					},
				},
				{
					name: "CA due: a new CA is trusted beside the old one, the old serving certificate stays",
					do:   advance(func(s certState) time.Time { return webhookcerts.RenewalTime(s.ca) }),
					want: func(before, after certState) error {
						switch {
						case after.ca.Equal(before.ca):
							return errors.New("the CA was not renewed")
						case len(after.bundle) != 2 || !after.bundle[0].Equal(after.ca) || !after.bundle[1].Equal(before.ca):
							return fmt.Errorf("bundle holds %d CAs, want the new one then the old one", len(after.bundle))
						case !after.serving.Equal(before.serving):
							return errors.New("the serving certificate changed before the new CA settled")
						}
						return nil
					},
				},
				{
					name: "new CA settled: the new CA signs the serving certificate, the old CA stays trusted",
					do: func(_ context.Context, _ *testing.T, e *env, _ certState) {
						e.clock.Step(2 * time.Minute)
					},
					want: func(before, after certState) error {
						switch {
						case after.serving.CheckSignatureFrom(before.ca) != nil:
							return errors.New("the serving certificate is not signed by the new CA yet")
						case len(after.bundle) != 2:
							return fmt.Errorf("bundle holds %d CAs, want 2", len(after.bundle))
						}
						return sameCA(before, after)
					},
				},
				{
					name: "old CA expired: it leaves the bundle",
					do:   advance(func(s certState) time.Time { return s.bundle[1].NotAfter }),
					want: func(_, after certState) error {
						if len(after.bundle) != 1 {
							return fmt.Errorf("bundle holds %d CAs, want 1", len(after.bundle))
						}
						return nil
					},
				},
			},
		},
		"a caBundle reset by a restore or a re-applied manifest is repaired": {
			steps: []step{{
				name: "both configurations get a foreign CA",
				do: func(ctx context.Context, t *testing.T, e *env, _ certState) {
					foreign, err := testcerts.NewCA("foreign")
					if err != nil {
						t.Fatal(err)
					}
					setBundles(ctx, t, e, foreign.CertPEM)
				},
				want: sameCA,
			}},
		},
		"a deleted Secret is recreated with a new CA": {
			steps: []step{{
				name: "Secret deleted",
				do: func(ctx context.Context, t *testing.T, e *env, _ certState) {
					secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: e.opts.SecretName}}
					if err := e.cp.Client.Delete(ctx, secret); err != nil {
						t.Fatal(err)
					}
				},
				want: func(before, after certState) error {
					if after.ca.Equal(before.ca) {
						return errors.New("the CA is still the old one")
					}
					return nil
				},
			}},
		},
	}
	i := 0
	for name, tc := range tests {
		i++
		t.Run(name, func(t *testing.T) {
			e := &env{
				cp:       cp,
				clock:    clocktesting.NewFakeClock(time.Now()),
				registry: prometheus.NewRegistry(),
				opts: webhookcerts.Options{
					Namespace:         namespace,
					SecretName:        fmt.Sprintf("webhook-tls-%d", i),
					ServiceName:       service,
					Hosts:             []string{"127.0.0.1"},
					CertDir:           t.TempDir(),
					ValidatingWebhook: fmt.Sprintf("fencegate-%d", i),
					MutatingWebhook:   fmt.Sprintf("fencegate-%d", i),
					CAValidity:        caValidity,
					CertValidity:      certValidity,
				},
			}
			e.opts.Clock = e.clock
			e.opts.Registerer = e.registry
			// The log line that says readiness waits is the signal that
			// the pass which could (wrongly) have closed ready is over.
			waiting := make(chan struct{}, 1)
			testLog := testr.New(t)
			e.opts.Log = funcr.New(func(prefix, args string) {
				if strings.Contains(args, "webhook configurations missing") {
					select {
					case waiting <- struct{}{}:
					default:
					}
				}
				testLog.Info(prefix + " " + args)
			}, funcr.Options{})
			if !tc.configsLater {
				createWebhookConfigs(ctx, t, e)
			}
			if tc.before != nil {
				tc.before(ctx, t, e)
			}
			mgrCtx := startManager(ctx, t, e)
			if tc.configsLater {
				select {
				case <-waiting:
				case <-ctx.Done():
					t.Fatal("the certificate manager never said it waits for the webhook configurations")
				}
				select {
				case <-e.ready:
					t.Fatal("ready before the webhook configurations exist")
				default:
				}
				createWebhookConfigs(ctx, t, e)
			}
			select {
			case <-e.ready:
			case <-ctx.Done():
				t.Fatal("the certificate manager never became ready")
			}
			serve(mgrCtx, t, e)
			state := converged(ctx, t, e, func(certState) error { return nil })
			if got := expiryMetric(t, e, "serving"); got != float64(state.serving.NotAfter.Unix()) {
				t.Errorf("serving expiry metric = %v, want %v", got, state.serving.NotAfter.Unix())
			}
			for _, s := range tc.steps {
				before := state
				s.do(ctx, t, e, before)
				state = converged(ctx, t, e, func(after certState) error { return s.want(before, after) })
				t.Logf("%s: ok", s.name)
			}
		})
	}
}

// startManager runs a manager with the certificate manager until the test
// ends; the context it returns ends with the manager.
func startManager(ctx context.Context, t *testing.T, e *env) context.Context {
	t.Helper()
	mgr, err := manager.New(e.cp.Config, manager.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Logger:                 testr.New(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	if e.ready, err = webhookcerts.Add(mgr, e.opts); err != nil {
		t.Fatal(err)
	}
	return testrun.Start(t, ctx, "manager", mgr.Start)
}

// serve runs a TLS server on CertDir, set up as the webhook server is, until
// ctx ends.
func serve(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	cfg, watcher, err := tlsutil.Server(tlsutil.ServerFiles{
		CertFile: filepath.Join(e.opts.CertDir, "tls.crt"),
		KeyFile:  filepath.Join(e.opts.CertDir, "tls.key"),
	})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = tlsutil.RunWatcher(ctx, watcher) }()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	e.server = ln.Addr().String()
}

// converged polls until the Secret, the files, both configurations and the
// served certificate agree, and want accepts the result.
func converged(ctx context.Context, t *testing.T, e *env, want func(certState) error) certState {
	t.Helper()
	var state certState
	var last error
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		state, last = observe(ctx, e)
		if last == nil {
			last = want(state)
		}
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("not converged: %v", last)
	}
	return state
}

func observe(ctx context.Context, e *env) (certState, error) {
	var s certState
	secret := &corev1.Secret{}
	if err := e.cp.Client.Get(ctx, client.ObjectKey{Namespace: namespace, Name: e.opts.SecretName}, secret); err != nil {
		return s, fmt.Errorf("get Secret: %w", err)
	}
	for _, k := range []string{"ca.crt", "ca.key", "ca-bundle.crt", "tls.crt", "tls.key"} {
		if len(secret.Data[k]) == 0 {
			return s, fmt.Errorf("Secret has no %s", k)
		}
	}
	ca, err := parseCert(secret.Data["ca.crt"])
	if err != nil {
		return s, err
	}
	s.ca = ca
	for _, k := range []string{"tls.crt", "tls.key"} {
		file, err := os.ReadFile(filepath.Join(e.opts.CertDir, k))
		if err != nil {
			return s, err
		}
		if !bytes.Equal(file, secret.Data[k]) {
			return s, fmt.Errorf("%s in the certificate directory differs from the Secret's", k)
		}
	}

	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := e.cp.Client.Get(ctx, client.ObjectKey{Name: e.opts.ValidatingWebhook}, vwc); err != nil {
		return s, err
	}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := e.cp.Client.Get(ctx, client.ObjectKey{Name: e.opts.MutatingWebhook}, mwc); err != nil {
		return s, err
	}
	var bundles [][]byte
	for _, w := range vwc.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	for _, w := range mwc.Webhooks {
		bundles = append(bundles, w.ClientConfig.CABundle)
	}
	for i, b := range bundles {
		if !bytes.Equal(b, secret.Data["ca-bundle.crt"]) {
			return s, fmt.Errorf("webhook %d of the configurations does not carry the Secret's bundle", i)
		}
	}

	// What the API server would do: dial the webhook, trusting the bundle
	// of the configuration, at the (fake) current time.
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundles[0]) {
		return s, errors.New("the injected bundle holds no certificate")
	}
	for rest := bundles[0]; ; {
		var block *pem.Block
		if block, rest = pem.Decode(rest); block == nil {
			break
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return s, err
		}
		s.bundle = append(s.bundle, c)
	}
	dialer := &tls.Dialer{
		NetDialer: &net.Dialer{Timeout: time.Second},
		Config:    &tls.Config{RootCAs: pool, ServerName: serverName, Time: e.clock.Now, MinVersion: tls.VersionTLS12},
	}
	conn, err := dialer.DialContext(ctx, "tcp", e.server)
	if err != nil {
		return s, fmt.Errorf("TLS handshake with the injected bundle: %w", err)
	}
	s.serving = conn.(*tls.Conn).ConnectionState().PeerCertificates[0]
	_ = conn.Close()
	file, err := parseCert(secret.Data["tls.crt"])
	if err != nil {
		return s, err
	}
	if !file.Equal(s.serving) {
		return s, errors.New("the server does not serve the certificate of the files yet")
	}
	return s, nil
}

func createWebhookConfigs(ctx context.Context, t *testing.T, e *env) {
	t.Helper()
	hook := func(name string) (admissionregistrationv1.WebhookClientConfig, []admissionregistrationv1.RuleWithOperations) {
		return admissionregistrationv1.WebhookClientConfig{
				Service: &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: service, Path: ptr.To("/" + name)},
			}, []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{"components.fencegate.dev"}, APIVersions: []string{"v1alpha1"}, Resources: []string{"components"},
				},
			}}
	}
	none := ptr.To(admissionregistrationv1.SideEffectClassNone)
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: e.opts.ValidatingWebhook}}
	for _, name := range []string{"validate.fencegate.dev", "validate-status.fencegate.dev"} {
		cc, rules := hook("validate")
		vwc.Webhooks = append(vwc.Webhooks, admissionregistrationv1.ValidatingWebhook{
			Name: name, ClientConfig: cc, Rules: rules, SideEffects: none, AdmissionReviewVersions: []string{"v1"},
		})
	}
	cc, rules := hook("mutate")
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: e.opts.MutatingWebhook},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name: "mutate.fencegate.dev", ClientConfig: cc, Rules: rules, SideEffects: none, AdmissionReviewVersions: []string{"v1"},
		}},
	}
	for _, obj := range []client.Object{vwc, mwc} {
		if err := e.cp.Client.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

func setBundles(ctx context.Context, t *testing.T, e *env, bundle []byte) {
	t.Helper()
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := e.cp.Client.Get(ctx, client.ObjectKey{Name: e.opts.ValidatingWebhook}, vwc); err != nil {
		t.Fatal(err)
	}
	if err := e.cp.Client.Get(ctx, client.ObjectKey{Name: e.opts.MutatingWebhook}, mwc); err != nil {
		t.Fatal(err)
	}
	for i := range vwc.Webhooks {
		vwc.Webhooks[i].ClientConfig.CABundle = bundle
	}
	for i := range mwc.Webhooks {
		mwc.Webhooks[i].ClientConfig.CABundle = bundle
	}
	for _, obj := range []client.Object{vwc, mwc} {
		if err := e.cp.Client.Update(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
}

func expiryMetric(t *testing.T, e *env, cert string) float64 {
	t.Helper()
	families, err := e.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "fencegate_webhook_certificate_expiry_timestamp_seconds" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "certificate" && l.GetValue() == cert {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no expiry metric for %s", cert)
	return 0
}

func parseCert(p []byte) (*x509.Certificate, error) {
	block, _ := pem.Decode(p)
	if block == nil {
		return nil, errors.New("no PEM certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

func TestOptionsAreChecked(t *testing.T) {
	valid := webhookcerts.Options{Namespace: "ns", SecretName: "tls", ServiceName: "svc", CertDir: "/tmp/x"}
	tests := map[string]struct {
		change func(o *webhookcerts.Options)
		want   string
	}{
		"no namespace":      {func(o *webhookcerts.Options) { o.Namespace = "" }, "namespace is required"},
		"bad secret name":   {func(o *webhookcerts.Options) { o.SecretName = "Not_A_Name" }, `secret name "Not_A_Name"`},
		"no cert dir":       {func(o *webhookcerts.Options) { o.CertDir = "" }, "certificate directory is required"},
		"no name to serve":  {func(o *webhookcerts.Options) { o.ServiceName = "" }, "a service name or at least one host"},
		"bad service name":  {func(o *webhookcerts.Options) { o.ServiceName = "svc.x" }, `service name "svc.x"`},
		"bad host":          {func(o *webhookcerts.Options) { o.Hosts = []string{"not a host"} }, `host "not a host"`},
		"negative validity": {func(o *webhookcerts.Options) { o.CertValidity = -time.Hour }, "validity must not be negative"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			o := valid
			tc.change(&o)
			_, err := webhookcerts.Add(nil, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Add error = %v, want one containing %q", err, tc.want)
			}
		})
	}
}

func TestReadyCheck(t *testing.T) {
	ready := make(chan struct{})
	check := webhookcerts.ReadyCheck(ready)
	if err := check(nil); err == nil {
		t.Error("ready check passes before the certificates are in place")
	}
	close(ready)
	if err := check(nil); err != nil {
		t.Errorf("ready check fails after the certificates are in place: %v", err)
	}
}
