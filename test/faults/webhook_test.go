package faults

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/test/testrun"
	"github.com/fencegate/fencegate/webhook"
)

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// webhookServer is an in-process webhook serving an engine over TLS.
type webhookServer struct {
	addr  string
	roots *x509.CertPool
}

// serve runs the webhook for e with the certificate files in certDir
// (chaining to ca) until the test ends.
func serve(t *testing.T, e *engine.Engine, certDir string, ca *testcerts.CA, reg *prometheus.Registry) *webhookServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.New(webhook.Options{Listener: ln, CertDir: certDir, Engine: e, Registerer: reg, Logger: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	testrun.Start(t, context.Background(), "webhook", s.Start)
	w := &webhookServer{addr: ln.Addr().String(), roots: x509.NewCertPool()}
	w.roots.AppendCertsFromPEM(ca.CertPEM)
	eventually(t, "the webhook answers", func() bool {
		code, _ := w.get(t, webhook.PathPolicyStatus)
		return code == http.StatusOK
	})
	return w
}

// get fetches an operational endpoint over a new connection.
func (w *webhookServer) get(t *testing.T, path string) (int, string) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: w.roots, MinVersion: tls.VersionTLS12}, DisableKeepAlives: true,
	}}
	resp, err := c.Get("https://" + w.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// servedSerial is the serial number of the certificate a new connection is
// served.
func (w *webhookServer) servedSerial(t *testing.T) *big.Int {
	t.Helper()
	conn, err := tls.Dial("tcp", w.addr, &tls.Config{RootCAs: w.roots, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS handshake with the webhook: %v", err)
	}
	defer func() { _ = conn.Close() }()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}

// mixed are the requests of the load: creates and a large update, to both
// endpoints.
func mixed(t *testing.T) func(worker, i int) request {
	bodies := [][]byte{
		enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("billing", "payments", nil)}),
		enginetest.LargeUpdate(t),
	}
	return func(worker, i int) request {
		path := webhook.PathValidate
		if (worker+i)%2 == 1 {
			path = webhook.PathMutate
		}
		return request{path: path, body: bodies[i%len(bodies)]}
	}
}

// waitAnswers waits until the load got n more answers after at.
func waitAnswers(t *testing.T, l *load, at time.Duration, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d requests are answered", n), func() bool { return len(l.since(at)) >= n })
}

func serial(t *testing.T, p testcerts.Pair) *big.Int {
	t.Helper()
	block, _ := pem.Decode(p.CertPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert.SerialNumber
}

// certLayout writes serving certificates into a directory the way some
// tool does.
type certLayout func(t *testing.T, dir string, p testcerts.Pair, version int)

// inPlace rewrites tls.crt, then tls.key: for a moment they do not match.
func inPlace(t *testing.T, dir string, p testcerts.Pair, _ int) {
	t.Helper()
	for name, content := range map[string][]byte{"tls.crt": p.CertPEM, "tls.key": p.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// secretVolume writes the files as the kubelet updates a Secret volume:
// into a new directory, then ..data, which tls.crt and tls.key link
// through, is swapped to it at once and the old directory removed.
func secretVolume(t *testing.T, dir string, p testcerts.Pair, version int) {
	t.Helper()
	data := fmt.Sprintf("..2026_01_01_00_00_%02d.%d", version, version)
	if err := os.Mkdir(filepath.Join(dir, data), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string][]byte{"tls.crt": p.CertPEM, "tls.key": p.KeyPEM} {
		if err := os.WriteFile(filepath.Join(dir, data, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	previous, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(data, filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if previous == "" {
		for _, name := range []string{"tls.crt", "tls.key"} {
			if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	if err := os.RemoveAll(filepath.Join(dir, previous)); err != nil {
		t.Fatal(err)
	}
}

// TestCertificateRotationUnderLoad rotates the webhook's serving
// certificate three times while clients hammer it on kept-alive and new
// connections: no request fails, and new connections get the new
// certificate.
func TestCertificateRotationUnderLoad(t *testing.T) {
	tests := map[string]certLayout{
		"files rewritten in place":         inPlace,
		"a Secret volume's ..data swapped": secretVolume,
	}
	for name, write := range tests {
		t.Run(name, func(t *testing.T) {
			ca, err := testcerts.NewCA("webhook-ca")
			if err != nil {
				t.Fatal(err)
			}
			pair := func() testcerts.Pair {
				p, err := ca.Server("127.0.0.1")
				if err != nil {
					t.Fatal(err)
				}
				return p
			}
			dir := t.TempDir()
			first := pair()
			write(t, dir, first, 0)
			e, err := engine.New(engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			active := enginetest.Fence(fencestate.Active, "east", 7, "east", 7)
			if err := e.WriteFence(context.Background(), active); err != nil {
				t.Fatal(err)
			}
			w := serve(t, e, dir, ca, prometheus.NewRegistry())
			if got := w.servedSerial(t); got.Cmp(serial(t, first)) != 0 {
				t.Fatalf("served certificate %x, want the first one %x", got, serial(t, first))
			}

			l := startLoad(t, w.addr, w.roots, 4, mixed(t))
			waitAnswers(t, l, 0, 200)
			for version := 1; version <= 3; version++ {
				next := pair()
				mark := l.now()
				write(t, dir, next, version)
				eventually(t, fmt.Sprintf("new connections get certificate #%d", version), func() bool {
					return w.servedSerial(t).Cmp(serial(t, next)) == 0
				})
				waitAnswers(t, l, mark, 200)
			}
			last := l.now()
			waitAnswers(t, l, last, 200)
			l.end()

			all := l.since(0)
			if msgs, n := failures(all); n > 0 {
				t.Errorf("%d of %d requests failed during the rotations, e.g.:\n  %s", n, len(all), strings.Join(msgs, "\n  "))
			}
			kept, fresh := 0, 0
			for _, a := range l.since(last) {
				if a.fresh {
					fresh++
				} else {
					kept++
				}
			}
			if kept == 0 || fresh == 0 {
				t.Errorf("after the last rotation %d requests went over kept-alive connections and %d over new ones: want both", kept, fresh)
			}
			for _, a := range all {
				if a.err == nil && !a.response.Allowed {
					t.Errorf("the active cluster denied a request: %s", a.message())
					break
				}
			}
			t.Logf("%d requests answered during three rotations, none failed", len(all))
		})
	}
}

// TestBrokenPolicyUnderLoad pushes a policy that does not compile while the
// webhook answers a stream of requests: the last good policy keeps
// deciding, no request fails, the error shows on /status/policy and in
// fencegate_policy_reloads_total, and the corrected policy is then picked
// up.
func TestBrokenPolicyUnderLoad(t *testing.T) {
	const (
		goodDenial  = `denial := concat("", ["fencegate: ", kind_clause, ownership.explanation])`
		v2Denial    = `denial := concat("", ["fencegate (v2): ", kind_clause, ownership.explanation])`
		typo        = `denial := concat("", ["fencegate (v2): ", kind_clause, ownership.explanation]`
		firstPrefix = "fencegate: cluster "
		v2Prefix    = "fencegate (v2): cluster "
	)
	dir := enginetest.CopyPolicies(t)
	src, err := os.ReadFile(filepath.Join(dir, "admission.rego"))
	if err != nil {
		t.Fatal(err)
	}
	admission := string(src)
	if !strings.Contains(admission, goodDenial) {
		t.Fatalf("admission.rego has no rule %q to edit", goodDenial)
	}
	reg := prometheus.NewPedanticRegistry()
	e, err := engine.New(engine.Options{PolicyDir: dir, ReloadDelay: 50 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	fenced := enginetest.Fence(fencestate.Fenced, "west", 3, "east", 7)
	if err := e.WriteFence(context.Background(), fenced); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	reloading := make(chan error, 1)
	go func() { reloading <- e.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-reloading; err != nil {
			t.Errorf("engine: %v", err)
		}
	})
	ca, pair, err := testcerts.Loopback("webhook-ca")
	if err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	inPlace(t, certDir, pair, 0)
	w := serve(t, e, certDir, ca, reg)
	policyStatus := func() engine.PolicyStatus {
		code, body := w.get(t, webhook.PathPolicyStatus)
		var s engine.PolicyStatus
		if code != http.StatusOK || json.Unmarshal([]byte(body), &s) != nil {
			t.Fatalf("GET %s = %d %s", webhook.PathPolicyStatus, code, body)
		}
		return s
	}
	good := policyStatus().Revision

	creates := enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("billing", "payments", nil)})
	l := startLoad(t, w.addr, w.roots, 2, func(_, i int) request {
		path := webhook.PathValidate
		if i%4 == 3 {
			path = webhook.PathMutate
		}
		return request{path: path, body: creates}
	})
	denials := func(answers []answer, prefix string) (validated, wrong int, example string) {
		for _, a := range answers {
			if a.err != nil || a.path != webhook.PathValidate {
				continue
			}
			validated++
			if a.response.Allowed || !strings.HasPrefix(a.message(), prefix) {
				wrong++
				example = a.message()
			}
		}
		return validated, wrong, example
	}
	waitAnswers(t, l, 0, 100)

	t.Run("a policy that does not compile leaves the last good one in force", func(t *testing.T) {
		broken := strings.Replace(admission, goodDenial, typo, 1)
		// Written in place, as an editor or kubectl cp may: the engine
		// may even read it half written.
		if err := os.WriteFile(filepath.Join(dir, "admission.rego"), []byte(broken), 0o600); err != nil {
			t.Fatal(err)
		}
		// The compiler's message names the file and line; a reload of
		// the file half written may fail first with another message.
		eventually(t, "the failed reload shows on "+webhook.PathPolicyStatus, func() bool {
			last := policyStatus().LastReload
			return last != nil && last.Result == "error" && strings.Contains(last.Error, "admission.rego:")
		})
		mark := l.now()
		if status := policyStatus(); status.Revision != good {
			t.Errorf("policy status = %+v; want revision %s still in force", status, good)
		}
		if got := enginetest.Reloads(t, reg, "error"); got == 0 {
			t.Errorf("fencegate_policy_reloads_total{result=\"error\"} = %v, without the failed reload", got)
		}
		waitAnswers(t, l, mark, 100)
		if n, wrong, example := denials(l.since(mark), firstPrefix); n == 0 || wrong > 0 {
			t.Errorf("%d of %d decisions after the broken push were not the last good policy's denial, e.g. %q", wrong, n, example)
		}
	})

	t.Run("the corrected policy is picked up", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(dir, "admission.rego"), []byte(strings.Replace(admission, goodDenial, v2Denial, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the corrected policy is in force", func() bool {
			s := policyStatus()
			return s.LastReload != nil && s.LastReload.Result == "success" && s.Revision != good
		})
		mark := l.now()
		waitAnswers(t, l, mark, 100)
		if n, wrong, example := denials(l.since(mark), v2Prefix); n == 0 || wrong > 0 {
			t.Errorf("%d of %d decisions after the correction were not the corrected policy's denial, e.g. %q", wrong, n, example)
		}
	})

	l.end()
	all := l.since(0)
	if msgs, n := failures(all); n > 0 {
		t.Errorf("%d of %d requests failed (a 5xx or a broken connection) while policies were pushed, e.g.:\n  %s", n, len(all), strings.Join(msgs, "\n  "))
	}
	if n, wrong, example := denials(all, "fencegate"); wrong > 0 {
		t.Errorf("%d of %d decisions were not a fence denial, e.g. %q", wrong, n, example)
	}
	t.Logf("%d requests answered while a broken and then a corrected policy were pushed, none failed", len(all))
}
