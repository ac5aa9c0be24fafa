package webhook_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/webhook"
)

// writeServingCert writes a certificate for 127.0.0.1 signed by a new CA as
// dir/tls.crt and dir/tls.key, and returns the CA.
func writeServingCert(t *testing.T, dir string) *testcerts.CA {
	t.Helper()
	ca, pair, err := testcerts.Loopback("webhook-test")
	if err != nil {
		t.Fatal(err)
	}
	// Written beside and renamed into place, as a Secret volume update is.
	for name, content := range map[string][]byte{"tls.key": pair.KeyPEM, "tls.crt": pair.CertPEM} {
		tmp := filepath.Join(dir, "."+name)
		if err := os.WriteFile(tmp, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return ca
}

func TestServeTLS(t *testing.T) {
	e, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.WriteFence(context.Background(), eastActive); err != nil {
		t.Fatal(err)
	}
	certDir := t.TempDir()
	firstCA := writeServingCert(t, certDir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.New(webhook.Options{Listener: ln, CertDir: certDir, Engine: e})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(firstCA.CertPEM)
	client := func() *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		}}
	}
	url := "https://" + ln.Addr().String()
	eventually(t, "the server answers "+webhook.PathPolicyStatus, func() bool {
		resp, err := client().Get(url + webhook.PathPolicyStatus)
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})

	body := enginetest.Review(t, engine.ReviewRequest{UID: "tls-1", Operation: "CREATE", Object: enginetest.Component("billing", "default", nil)})
	resp, err := client().Post(url+webhook.PathValidate, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"uid":"tls-1","allowed":true`) {
		t.Errorf("POST /validate over TLS = %d %s", resp.StatusCode, out)
	}

	t.Run("a rotated certificate is served without a restart", func(t *testing.T) {
		secondCA := writeServingCert(t, certDir)
		roots.AppendCertsFromPEM(secondCA.CertPEM)
		second := x509.NewCertPool()
		second.AppendCertsFromPEM(secondCA.CertPEM)
		eventually(t, "the new certificate is served", func() bool {
			conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: second, MinVersion: tls.VersionTLS12})
			if err != nil {
				return false
			}
			_ = conn.Close()
			return true
		})
	})
}

func TestStartWithoutCertificate(t *testing.T) {
	e, err := engine.New(engine.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := webhook.New(webhook.Options{Addr: "127.0.0.1:0", CertDir: t.TempDir(), Engine: e})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "tls.crt") {
		t.Errorf("Start without certificate files = %v, want an error naming tls.crt", err)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
