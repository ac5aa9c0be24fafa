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

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// FloorCommand is the first argument that runs the bench's own binary as
// one of the baselines, the floor or the allow-all webhook (ServeFloor);
// the bench starts it so.
const FloorCommand = "serve-floor"

// floorAnswer is what the floor server answers every request with.
var floorAnswer = []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"floor","allowed":true}}`)

// ServeFloorCommand serves as FloorCommand asks, when args (a process's
// arguments after its name) start with it, until ctx ends: it says whether
// they did, and the process's exit code. The bench's command calls it
// first, and so does this package's test binary, which the bench starts
// when it runs under go test.
func ServeFloorCommand(ctx context.Context, args []string) (served bool, code int) {
	if len(args) == 0 || args[0] != FloorCommand {
		return false, 0
	}
	if err := ServeFloor(ctx, args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return true, 1
	}
	return true, 0
}

// ServeFloor runs the floor server until ctx ends: a Go HTTPS server,
// configured like fencegate's webhook, that reads each request's body and
// answers a canned AdmissionReview without decoding anything. What the load generator
// measures against it is what this machine, TLS and the load generator cost
// by themselves: the floor under every server's figures.
//
// With -allow-all it serves the allow-all webhook instead
// (allowAllHandler): the same server, answering through controller-runtime's
// admission webhook.
func ServeFloor(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(FloorCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the error says what is wrong
	addr := fs.String("addr", "", "address to serve HTTPS on")
	certFile := fs.String("cert", "", "serving certificate (PEM)")
	keyFile := fs.String("key", "", "serving key (PEM)")
	allowAll := fs.Bool("allow-all", false, "answer through controller-runtime's admission webhook, allowing every request")
	if err := fs.Parse(args); err != nil {
		return err
	}
	name := floorServer
	var handler http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(floorAnswer)
	})
	if *allowAll {
		// Its log lines are dropped, as a webhook's are at the default
		// verbosity (it logs each request only at V(5)).
		log.SetLogger(logr.Discard())
		name, handler = allowAllServer, allowAllHandler()
	}
	cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
	if err != nil {
		return fmt.Errorf("%s: certificate: %w", name, err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	srv := &http.Server{
		Handler:           handler,
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
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// allowAllHandler is the allow-all webhook: controller-runtime's admission
// webhook, which most Go admission webhooks are built on, with a handler
// that allows every request without looking at it. It decodes each
// AdmissionReview and encodes the answer as any such webhook does, and
// decides nothing: what reading a request the usual Go way costs, before
// any decision. It leaves out what a deployed one adds: controller-runtime's
// request metrics (the webhook server's instrumentation), and log lines.
func allowAllHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", &admission.Webhook{Handler: admission.HandlerFunc(func(context.Context, admission.Request) admission.Response {
		return admission.Allowed("")
	})})
	// The webhook answers a request without a body with an error review
	// (and logs it); the bench's health checks need neither.
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	return mux
}

// startBaseline runs this binary as the baseline named name (floorServer
// or allowAllServer) in dir.
func startBaseline(ctx context.Context, dir, name string) (*serverProcess, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("the bench's own binary: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("%s directory: %w", name, err)
	}
	srv, err := newServing(dir)
	if err != nil {
		return nil, err
	}
	args := []string{FloorCommand, "-addr", srv.addr, "-cert", srv.certFile, "-key", srv.keyFile}
	switch name {
	case floorServer:
	case allowAllServer:
		args = append(args, "-allow-all")
	default:
		return nil, fmt.Errorf("no baseline is named %q", name)
	}
	return startServerProcess(ctx, name, dir, srv, self, args...)
}

// allowEvery is what the allow-all webhook must answer to reviews: each
// allowed, with no warning or patch.
func allowEvery(reviews []review) expected {
	want := expected{}
	for _, r := range reviews {
		want[r.UID] = answer{allowed: true}
	}
	return want
}
