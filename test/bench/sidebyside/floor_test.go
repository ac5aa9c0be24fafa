package sidebyside

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/fencegate/fencegate/internal/testcerts"
)

func TestFloorServerAnswersTheCannedReview(t *testing.T) {
	dir := t.TempDir()
	srv, err := newServing(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- ServeFloor(ctx, []string{"-addr", srv.addr, "-cert", srv.certFile, "-key", srv.keyFile})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("floor server: %v", err)
		}
	}()
	cfg, err := clientTLS(srv.ca)
	if err != nil {
		t.Fatal(err)
	}
	waitServing(t, "https://"+srv.addr+"/health", cfg)
	client := newClient(target{TLS: cfg}, true, 1)
	defer client.CloseIdleConnections()
	resp, err := client.Post("https://"+srv.addr+"/", "application/json", bytes.NewReader(testReviews(t)[1].Body))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		code    int
		body    []byte
		wantErr string
	}{
		"its answer":   {code: resp.StatusCode, body: body},
		"another body": {code: http.StatusOK, body: []byte(`{}`), wantErr: "want 200"},
		"another code": {code: http.StatusServiceUnavailable, body: floorAnswer, wantErr: "HTTP 503"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkErr(t, exactAnswer(floorAnswer).check(tc.code, tc.body), tc.wantErr)
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
		"no certificate": {args: []string{"-addr", "127.0.0.1:0", "-cert", dir + "/missing.crt", "-key", key}, wantErr: "floor server certificate"},
		"bad address":    {args: []string{"-addr", "256.0.0.1:0", "-cert", cert, "-key", key}, wantErr: "floor server"},
		"unknown flag":   {args: []string{"-port", "1"}, wantErr: "flag provided but not defined"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			checkErr(t, ServeFloor(t.Context(), tc.args), tc.wantErr)
		})
	}
}
