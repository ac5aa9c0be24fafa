package sidebyside

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/fencegate/fencegate/internal/testcerts"
)

// serveBaseline runs ServeFloor with args until the test ends and returns
// its URL and a client that trusts it.
func serveBaseline(t *testing.T, args ...string) (string, *http.Client) {
	t.Helper()
	srv, err := newServing(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ServeFloor(ctx, append([]string{"-addr", srv.addr, "-cert", srv.certFile, "-key", srv.keyFile}, args...))
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("floor server: %v", err)
		}
	})
	cfg, err := clientTLS(srv.ca)
	if err != nil {
		t.Fatal(err)
	}
	url := "https://" + srv.addr + "/"
	waitServing(t, url+"health", cfg)
	client := newClient(target{TLS: cfg}, true, 1)
	t.Cleanup(client.CloseIdleConnections)
	return url, client
}

// post sends body to url and returns the answer.
func post(t *testing.T, client *http.Client, url string, body []byte) (int, []byte) {
	t.Helper()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, answer
}

func TestFloorServerAnswersTheCannedReview(t *testing.T) {
	url, client := serveBaseline(t)
	code, body := post(t, client, url, testReviews(t)[1].Body)
	tests := map[string]struct {
		code    int
		body    []byte
		wantErr string
	}{
		"its answer":   {code: code, body: body},
		"another body": {code: http.StatusOK, body: []byte(`{}`), wantErr: "want 200"},
		"another code": {code: http.StatusServiceUnavailable, body: floorAnswer, wantErr: "HTTP 503"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkErr(t, exactAnswer(floorAnswer).check(tc.code, tc.body), tc.wantErr)
		})
	}
}

// TestAllowAllWebhookAllowsEveryReview checks that the allow-all webhook
// decodes each review: it echoes the review's uid and allows it. A body
// that is not an AdmissionReview gets controller-runtime's error answer (an
// unversioned review with code 400), which the checker refuses.
func TestAllowAllWebhookAllowsEveryReview(t *testing.T) {
	url, client := serveBaseline(t, "-allow-all")
	reviews := testReviews(t)
	allowed := allowEvery(reviews)
	tests := map[string]struct {
		body    []byte
		wantErr string
	}{
		"a CREATE":                {body: reviews[0].Body},
		"an UPDATE":               {body: reviews[1].Body},
		"not an AdmissionReview":  {body: []byte(`{"kind":`), wantErr: "want admission.k8s.io/v1 AdmissionReview"},
		"a review of another uid": {body: bytes.Replace(reviews[0].Body, []byte(reviews[0].UID), []byte("00000000-0000-4000-8000-000000000000"), 1), wantErr: "is not one that was sent"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			code, body := post(t, client, url, tc.body)
			checkErr(t, newChecker(validate, allowed).check(code, body), tc.wantErr)
		})
	}
}

func TestFloorServerRefusesBadFlags(t *testing.T) {
	dir := t.TempDir()
	_, pair, err := testcerts.Loopback("test")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := pair.WriteFiles(dir, "tls")
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		args    []string
		wantErr string
	}{
		"no certificate": {args: []string{"-addr", "127.0.0.1:0", "-cert", dir + "/missing.crt", "-key", key}, wantErr: "floor: certificate"},
		"bad address":    {args: []string{"-addr", "256.0.0.1:0", "-cert", cert, "-key", key}, wantErr: "floor: listen"},
		"the allow-all webhook without a certificate": {
			args: []string{"-allow-all", "-addr", "127.0.0.1:0", "-cert", dir + "/missing.crt", "-key", key}, wantErr: "allow-all webhook: certificate",
		},
		"unknown flag": {args: []string{"-port", "1"}, wantErr: "flag provided but not defined"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkErr(t, ServeFloor(t.Context(), tc.args), tc.wantErr)
		})
	}
}
