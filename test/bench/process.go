package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fencegate/fencegate/internal/testcerts"
)

// serverProcess is a server the bench starts besides the stack (OPA's, the
// floor), serving HTTPS on a loopback address with a certificate of its own.
type serverProcess struct {
	// Addr is where it serves HTTPS, and CA the PEM CA of its certificate.
	Addr string
	CA   []byte
	// LogPath holds its output.
	LogPath string

	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// serving is the certificate a server process serves with.
type serving struct {
	addr, certFile, keyFile string
	ca                      []byte
}

// newServing makes a CA and a serving certificate for 127.0.0.1 in dir,
// and picks a free loopback port.
func newServing(dir string) (serving, error) {
	ca, err := testcerts.NewCA("fencegate bench CA")
	if err != nil {
		return serving{}, err
	}
	pair, err := ca.Server("127.0.0.1", "localhost")
	if err != nil {
		return serving{}, err
	}
	s := serving{ca: ca.CertPEM}
	if s.certFile, s.keyFile, err = pair.WriteFiles(dir, "tls"); err != nil {
		return serving{}, err
	}
	if s.addr, err = freeAddress(); err != nil {
		return serving{}, err
	}
	return s, nil
}

// startServerProcess runs bin with args, its output in dir/name.log, and
// waits until https://<addr>/health answers 200. The process is killed if
// the bench dies, so nothing outlives it.
func startServerProcess(ctx context.Context, name, dir string, srv serving, bin string, args ...string) (*serverProcess, error) {
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log of %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &serverProcess{Addr: srv.addr, CA: srv.ca, LogPath: logPath, name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logFile.Close()
		close(p.done)
	}()
	if err := p.waitHealthy(ctx); err != nil {
		_ = p.Stop()
		return nil, err
	}
	return p, nil
}

// Pid is the process's id.
func (p *serverProcess) Pid() int { return p.cmd.Process.Pid }

// waitHealthy polls /health over TLS until it answers 200.
func (p *serverProcess) waitHealthy(ctx context.Context) error {
	cfg, err := clientTLS(p.CA)
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+p.Addr+"/health", nil)
		if err != nil {
			return fmt.Errorf("health check of %s: %w", p.name, err)
		}
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was healthy (see %s): %w", p.name, p.LogPath, p.err)
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy at %s (see %s): %w", p.name, p.Addr, p.LogPath, ctx.Err())
		case <-ticker.C:
		}
	}
}

// Stop ends the process (SIGTERM, then SIGKILL after 10 seconds) and waits
// for it.
func (p *serverProcess) Stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within 10s of SIGTERM and was killed; see %s", p.name, p.LogPath)
	}
	var exitErr *exec.ExitError
	if p.err != nil && !errors.As(p.err, &exitErr) {
		return fmt.Errorf("%s: %w", p.name, p.err)
	}
	return nil
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
