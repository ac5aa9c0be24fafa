package tlsutil

import (
	"crypto/tls"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/testcerts"
)

// TestMutualTLS serves with Server and dials with Client: a client with a
// certificate from the trusted CA gets through, one without is refused.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile, _ := ca.WriteCA(dir, "ca")
	serverPair, _ := ca.Server("localhost", "127.0.0.1")
	serverCert, serverKey, _ := serverPair.WriteFiles(dir, "server")
	clientPair, _ := ca.Client("east")
	clientCert, clientKey, _ := clientPair.WriteFiles(dir, "client")

	serverCfg, _, err := Server(ServerFiles{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverCfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = conn.Close() }()
				_ = conn.(*tls.Conn).Handshake()
				_, _ = conn.Write([]byte("ok"))
			}()
		}
	}()

	tests := map[string]struct {
		files   ClientFiles
		wantErr string
	}{
		"client certificate accepted": {files: ClientFiles{CAFile: caFile, CertFile: clientCert, KeyFile: clientKey}},
		"no client certificate refused": {
			files:   ClientFiles{CAFile: caFile},
			wantErr: "certificate required",
		},
		"untrusted server refused": {
			files:   ClientFiles{CertFile: clientCert, KeyFile: clientKey},
			wantErr: "certificate signed by unknown authority",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := Client(tc.files)
			if err != nil {
				t.Fatal(err)
			}
			conn, err := tls.Dial("tcp", ln.Addr().String(), cfg)
			if err == nil {
				buf := make([]byte, 2)
				_, err = conn.Read(buf)
				_ = conn.Close()
			}
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("dial: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("dial error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestFileErrorsNameTheProblem(t *testing.T) {
	tests := map[string]struct {
		run     func() error
		wantErr string
	}{
		"server without key": {
			run:     func() error { _, _, err := Server(ServerFiles{CertFile: "tls.crt"}); return err },
			wantErr: "both a certificate file and a key file",
		},
		"client with half a pair": {
			run:     func() error { _, err := Client(ClientFiles{CertFile: "tls.crt"}); return err },
			wantErr: "both a certificate file and a key file",
		},
		"missing CA file": {
			run:     func() error { _, err := Client(ClientFiles{CAFile: "/nonexistent/ca.crt"}); return err },
			wantErr: "read CA file",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if err := tc.run(); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
