package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/testcerts"
)

// OPA's paths for the two webhooks (see system.rego).
const (
	opaValidatePath = "/"
	opaMutatePath   = "/v0/data/system/mutate"
)

// opaServer is an `opa run --server` process answering AdmissionReviews for
// one cluster's fence state.
type opaServer struct {
	// Addr is where it serves HTTPS, and CA the PEM CA of its certificate.
	Addr string
	CA   []byte
	// LogPath holds its output.
	LogPath string

	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// opaOptions configure an OPA server.
type opaOptions struct {
	// Binary is the opa command.
	Binary string
	// Dir receives the policies, data, certificates and log.
	Dir string
	// Fence is data.fence, as fencegate's agent writes it.
	Fence fencestate.State
	// ConfigFile is data.fencegate.config, the file fencegate is given.
	ConfigFile string
	// ReadOptimizedStore turns on --optimize-store-for-read-speed.
	ReadOptimizedStore bool
}

// startOPA writes the shipped policies with the tutorial's envelope, the
// fence data and a serving certificate for 127.0.0.1 into opts.Dir, starts
// OPA's server in its fastest configuration (errors-only logging, no
// decision logs, no version check) over TLS, and waits until it is healthy.
func startOPA(ctx context.Context, opts opaOptions) (*opaServer, error) {
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("OPA directory: %w", err)
	}
	modules, err := opaModules()
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--server",
		"--log-level", "error",
		"--skip-version-check",
	}
	if opts.ReadOptimizedStore {
		args = append(args, "--optimize-store-for-read-speed")
	}
	ca, err := testcerts.NewCA("fencegate bench OPA CA")
	if err != nil {
		return nil, err
	}
	pair, err := ca.Server("127.0.0.1", "localhost")
	if err != nil {
		return nil, err
	}
	certFile, keyFile, err := pair.WriteFiles(opts.Dir, "tls")
	if err != nil {
		return nil, err
	}
	addr, err := freeAddress()
	if err != nil {
		return nil, err
	}
	args = append(args, "--addr", addr, "--tls-cert-file", certFile, "--tls-private-key-file", keyFile)

	for name, src := range modules {
		path := filepath.Join(opts.Dir, name)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			return nil, fmt.Errorf("write policy %s: %w", name, err)
		}
		args = append(args, path)
	}
	fence, err := json.MarshalIndent(opts.Fence, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode data.fence: %w", err)
	}
	fenceFile := filepath.Join(opts.Dir, "fence.json")
	if err := os.WriteFile(fenceFile, fence, 0o600); err != nil {
		return nil, fmt.Errorf("write data.fence: %w", err)
	}
	args = append(args, "fence:"+fenceFile, "fencegate.config:"+opts.ConfigFile)

	logPath := filepath.Join(opts.Dir, "opa.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("OPA log: %w", err)
	}
	cmd := exec.Command(opts.Binary, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", opts.Binary, err)
	}
	s := &opaServer{Addr: addr, CA: ca.CertPEM, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		s.err = cmd.Wait()
		_ = logFile.Close()
		close(s.done)
	}()
	if err := s.waitHealthy(ctx); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// Pid is the OPA process's id.
func (s *opaServer) Pid() int { return s.cmd.Process.Pid }

// waitHealthy polls OPA's /health over TLS until it answers 200.
func (s *opaServer) waitHealthy(ctx context.Context) error {
	client, err := httpsClient(s.CA)
	if err != nil {
		return err
	}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+s.Addr+"/health", nil)
		if err != nil {
			return fmt.Errorf("OPA health check: %w", err)
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("OPA exited before it was healthy (see %s): %w", s.LogPath, s.err)
		case <-ctx.Done():
			return fmt.Errorf("OPA not healthy at %s: %w; see %s", s.Addr, ctx.Err(), s.LogPath)
		case <-ticker.C:
		}
	}
}

// Stop ends OPA (SIGTERM, then SIGKILL after 10 seconds) and waits for it.
func (s *opaServer) Stop() error {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
		return fmt.Errorf("OPA did not stop within 10s of SIGTERM and was killed; see %s", s.LogPath)
	}
	var exitErr *exec.ExitError
	if s.err != nil && !errors.As(s.err, &exitErr) {
		return fmt.Errorf("OPA: %w", s.err)
	}
	return nil
}

// httpsClient is a client that trusts the PEM CA, for health checks.
func httpsClient(caPEM []byte) (*http.Client, error) {
	cfg, err := clientTLS(caPEM)
	if err != nil {
		return nil, err
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}, nil
}

// clientTLS trusts only the PEM CA and does not resume sessions, so that
// every new connection makes a full handshake, as a fresh API server
// connection does.
func clientTLS(caPEM []byte) (*tls.Config, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("the server's CA is not a PEM certificate")
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// freeAddress returns a loopback address with a port nobody listens on.
func freeAddress() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String(), nil
}
