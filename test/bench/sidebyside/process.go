package sidebyside

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"time"

	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/test/proc"
)

// serverProcess is a server the bench starts besides the stack (OPA's, the
// baselines), serving HTTPS on a loopback address with a certificate of its
// own.
type serverProcess struct {
	*proc.Process
	// Addr is where it serves HTTPS, and CA the PEM CA of its certificate.
	Addr string
	CA   []byte
}

// serving is the certificate a server process serves with.
type serving struct {
	addr, certFile, keyFile string
	ca                      []byte
}

// newServing makes a CA and a serving certificate for 127.0.0.1 in dir,
// and picks a free loopback port.
func newServing(dir string) (serving, error) {
	ca, pair, err := testcerts.Loopback("fencegate bench CA")
	if err != nil {
		return serving{}, err
	}
	s := serving{ca: ca.CertPEM}
	if s.certFile, s.keyFile, err = pair.WriteFiles(dir, "tls"); err != nil {
		return serving{}, err
	}
	if s.addr, err = proc.FreeAddress(); err != nil {
		return serving{}, err
	}
	return s, nil
}

// startServerProcess runs bin with args, its output in dir/name.log, and
// waits until https://<addr>/health answers 200.
func startServerProcess(ctx context.Context, name, dir string, srv serving, bin string, args ...string) (*serverProcess, error) {
	p, err := proc.Start(bin, dir, name, args...)
	if err != nil {
		return nil, err
	}
	cfg, err := clientTLS(srv.ca)
	if err != nil {
		return nil, errors.Join(err, p.Stop(stopGrace))
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := p.WaitHealthy(ctx, client, "https://"+srv.addr+"/health"); err != nil {
		return nil, errors.Join(err, p.Stop(stopGrace))
	}
	return &serverProcess{Process: p, Addr: srv.addr, CA: srv.ca}, nil
}

// stopGrace is how long a server process may drain before it is killed.
const stopGrace = 10 * time.Second

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
