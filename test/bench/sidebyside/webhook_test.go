package sidebyside

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/yaml"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/test/stack"
	"github.com/fencegate/fencegate/webhook"
)

// testConfig is data.fencegate.config as the stack configures fencegate.
var testConfig = map[string]any{"enforcement": "deny", "controller_users": []any{stack.ControllerUser}}

// testStates are the fence states of the holder and of a fenced cluster.
var testStates = map[string]struct {
	fence   fencestate.State
	allowed bool
}{
	stateActive: {enginetest.Fence(fencestate.Active, "east", 1, "east", 1), true},
	stateFenced: {enginetest.Fence(fencestate.Fenced, "west", 1, "east", 1), false},
}

// testReviews are the reviews the bench sends, few enough for tests.
func testReviews(t testing.TB) []review {
	t.Helper()
	reviews, err := buildReviews(8)
	if err != nil {
		t.Fatal(err)
	}
	return reviews
}

// testExpected returns what every endpoint must answer for the reviews in
// a fence state.
func testExpected(t testing.TB, state string, reviews []review) map[endpoint]expected {
	t.Helper()
	ctx := context.Background()
	ref, err := newReference(ctx, testStates[state].fence, testConfig)
	if err != nil {
		t.Fatal(err)
	}
	want, err := expect(ctx, ref, reviews, testStates[state].allowed)
	if err != nil {
		t.Fatal(err)
	}
	return want
}

// newWebhook returns a webhook server over an engine holding state, with
// the decision log written as `fencegate run --log-format console` writes
// it, to nowhere. Given a listener, it serves TLS on it until the test ends;
// the TLS configuration returned trusts its certificate.
func newWebhook(t testing.TB, state fencestate.State, ln net.Listener) (*webhook.Server, *tls.Config) {
	t.Helper()
	dir := t.TempDir()
	config, err := yaml.Marshal(testConfig)
	if err != nil {
		t.Fatal(err)
	}
	configFile := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(configFile, config, 0o600); err != nil {
		t.Fatal(err)
	}
	e, err := engine.New(engine.Options{ConfigFile: configFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.WriteFence(context.Background(), state); err != nil {
		t.Fatal(err)
	}
	ca, pair, err := testcerts.Loopback("webhook test CA")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := pair.WriteFiles(dir, "tls"); err != nil {
		t.Fatal(err)
	}
	opts := webhook.Options{
		Addr: "127.0.0.1:0", Listener: ln, CertDir: dir, Engine: e, Registerer: prometheus.NewRegistry(),
		Logger: zap.New(zap.WriteTo(io.Discard), zap.UseDevMode(true), zap.StacktraceLevel(zapcore.PanicLevel)),
	}
	s, err := webhook.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := clientTLS(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if ln != nil {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Start(ctx) }()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("webhook server: %v", err)
			}
		})
		waitServing(t, "https://"+ln.Addr().String()+webhook.PathPolicyStatus, tlsCfg)
	}
	return s, tlsCfg
}

// waitServing polls url until it answers 200.
func waitServing(t testing.TB, url string, cfg *tls.Config) {
	t.Helper()
	client := newClient(target{TLS: cfg}, true, 1)
	defer client.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer: %v", url, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBothServersAnswerAsThePoliciesDecide checks, without processes, that
// fencegate's webhook and the policies OPA's server is given (the shipped
// ones under the tutorial's envelope) answer every review the way the
// reference evaluation of the shipped policies decides: the benchmark
// compares two servers that do the same work.
func TestBothServersAnswerAsThePoliciesDecide(t *testing.T) {
	ctx := context.Background()
	reviews := testReviews(t)
	for state, s := range testStates {
		want := testExpected(t, state, reviews)
		server, _ := newWebhook(t, s.fence, nil)
		handler := server.Handler()
		for ep, paths := range map[endpoint]struct{ webhook, opaQuery string }{
			validate: {webhook.PathValidate, "data.system.main"},
			mutate:   {webhook.PathMutate, "data.system.mutate"},
		} {
			t.Run(string(ep)+"/"+state, func(t *testing.T) {
				ref, err := newReference(ctx, s.fence, testConfig)
				if err != nil {
					t.Fatal(err)
				}
				envelope, err := ref.Prepare(ctx, paths.opaQuery)
				if err != nil {
					t.Fatal(err)
				}
				fg, opa := newChecker(ep, want[ep]), newChecker(ep, want[ep])
				for _, r := range reviews {
					rec := httptest.NewRecorder()
					req := httptest.NewRequest(http.MethodPost, paths.webhook, bytes.NewReader(r.Body))
					req.Header.Set("Content-Type", "application/json")
					handler.ServeHTTP(rec, req)
					if err := fg.check(rec.Code, rec.Body.Bytes()); err != nil {
						t.Errorf("fencegate, %s %s: %v", r.Operation, r.UID, err)
					}
					doc, err := envelope(ctx, r.Body)
					if err != nil {
						t.Fatal(err)
					}
					answer, err := json.Marshal(doc)
					if err != nil {
						t.Fatal(err)
					}
					if err := opa.check(http.StatusOK, answer); err != nil {
						t.Errorf("OPA's envelope, %s %s: %v", r.Operation, r.UID, err)
					}
				}
			})
		}
	}
}
