package sidebyside

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

// FloorCommand is the first argument that runs the bench's own binary as the
// floor server (ServeFloor); the bench starts it so.
const FloorCommand = "serve-floor"

// floorAnswer is what the floor server answers every request with.
var floorAnswer = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"floor","allowed":true}}`)

// ServeFloor runs the floor server until ctx ends: a Go HTTPS server,
// configured like fencegate's webhook, that reads each request's body and
// answers a canned AdmissionReview without decoding anything. What the load generator
// measures against it is what this machine, TLS and the load generator cost
// by themselves: the floor under every server's figures.
func ServeFloor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(FloorCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error says what is wrong
	addr := fs.String("addr", "", "address to serve HTTPS on")
	certFile := fs.String("cert", "", "serving certificate (PEM)")
	keyFile := fs.String("key", "", "serving key (PEM)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return fmt.Errorf("floor server certificate: %w", err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("floor server: %w", err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(floorAnswer)
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ServeTLS(ln, "", ""); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("floor server: %w", err)
	}
	return nil
}

// startFloor runs this binary as the floor server in dir.
func startFloor(ctx context.Context, dir string) (*serverProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the bench's own binary: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("floor server directory: %w", err)
	}
	srv, err := newServing(dir)
	if err != nil {
		return nil, err
	}
	return startServerProcess(ctx, "floor", dir, srv, self, FloorCommand, "-addr", srv.addr, "-cert", srv.certFile, "-key", srv.keyFile)
}
