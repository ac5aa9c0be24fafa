// Package tlsutil builds the TLS configurations of fencegate's gRPC and HTTPS
// endpoints from certificate files. Served certificates are re-read when their
// files change, so rotating them (cert-manager, a mounted Secret) needs no
// restart.
package tlsutil

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// ServerFiles name the files of a TLS server.
type ServerFiles struct {
	// CertFile and KeyFile hold the serving certificate and its key (PEM).
	CertFile, KeyFile string
	// ClientCAFile, if set, holds the CAs that client certificates must chain
	// to; clients without a valid certificate are refused (mTLS).
	ClientCAFile string
}

// Enabled reports whether a serving certificate is configured.
func (f ServerFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" }

// Server returns a TLS server configuration whose certificate is reloaded when
// its files change, and the watcher that does it; run the watcher with
// watcher.Start(ctx) for as long as the server serves.
func Server(f ServerFiles) (*tls.Config, *certwatcher.CertWatcher, error) {
	if f.CertFile == "" || f.KeyFile == "" {
		return nil, nil, errors.New("TLS needs both a certificate file and a key file")
	}
	watcher, err := certwatcher.New(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("load serving certificate %s / %s: %w", f.CertFile, f.KeyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: watcher.GetCertificate,
		NextProtos:     []string{"h2", "http/1.1"},
	}
	if f.ClientCAFile != "" {
		pool, err := loadPool(f.ClientCAFile)
		if err != nil {
			return nil, nil, err
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, watcher, nil
}

// ClientFiles name the files of a TLS client.
type ClientFiles struct {
	// CAFile holds the CAs that the server's certificate must chain to; empty
	// means the system's roots.
	CAFile string
	// CertFile and KeyFile hold a client certificate for mTLS.
	CertFile, KeyFile string
	// ServerName overrides the name checked in the server's certificate.
	ServerName string
}

// Enabled reports whether any TLS client setting is given.
func (f ClientFiles) Enabled() bool {
	return f.CAFile != "" || f.CertFile != "" || f.KeyFile != "" || f.ServerName != ""
}

// Client returns a TLS client configuration. A client certificate, if given,
// is re-read on each handshake so that rotated files take effect.
func Client(f ClientFiles) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	if f.CAFile != "" {
		pool, err := loadPool(f.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		if _, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile); err != nil {
			return nil, fmt.Errorf("load client certificate %s / %s: %w", f.CertFile, f.KeyFile, err)
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("load client certificate %s / %s: %w", f.CertFile, f.KeyFile, err)
			}
			return &cert, nil
		}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("a client certificate needs both a certificate file and a key file")
	}
	return cfg, nil
}

func loadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// RunWatcher runs a certificate watcher until ctx ends; it exists so callers
// can start one in a goroutine without juggling its error.
func RunWatcher(ctx context.Context, w *certwatcher.CertWatcher) error {
	if err := w.Start(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("watch serving certificate: %w", err)
	}
	return nil
}
