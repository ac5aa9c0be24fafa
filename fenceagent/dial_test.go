package fenceagent

import (
	"context"
	"crypto/tls"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/internal/tlsutil"
)

// TestDialTLS: the agent reaches an authority over TLS and mTLS with a
// client configuration from internal/tlsutil, and gets no answer when the
// certificates do not match.
func TestDialTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA("authority CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcerts.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	otherCAFile, err := other.WriteCA(dir, "other-ca")
	if err != nil {
		t.Fatal(err)
	}
	files := func(name string, pair func() (testcerts.Pair, error)) (string, string) {
		p, err := pair()
		if err != nil {
			t.Fatal(err)
		}
		cert, key, err := p.WriteFiles(dir, name)
		if err != nil {
			t.Fatal(err)
		}
		return cert, key
	}
	serverCert, serverKey := files("server", func() (testcerts.Pair, error) { return ca.Server("127.0.0.1", "localhost") })
	clientCert, clientKey := files("client", func() (testcerts.Pair, error) { return ca.Client("east") })

	tests := map[string]struct {
		server     *tlsutil.ServerFiles
		client     *tlsutil.ClientFiles
		wantActive bool
	}{
		"plaintext": {wantActive: true},
		"TLS": {
			server:     &tlsutil.ServerFiles{CertFile: serverCert, KeyFile: serverKey},
			client:     &tlsutil.ClientFiles{CAFile: caFile},
			wantActive: true,
		},
		"mTLS with a client certificate": {
			server:     &tlsutil.ServerFiles{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: caFile},
			client:     &tlsutil.ClientFiles{CAFile: caFile, CertFile: clientCert, KeyFile: clientKey},
			wantActive: true,
		},
		"mTLS without a client certificate": {
			server: &tlsutil.ServerFiles{CertFile: serverCert, KeyFile: serverKey, ClientCAFile: caFile},
			client: &tlsutil.ClientFiles{CAFile: caFile},
		},
		"a server certificate from another CA": {
			server: &tlsutil.ServerFiles{CertFile: serverCert, KeyFile: serverKey},
			client: &tlsutil.ClientFiles{CAFile: otherCAFile},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var serverOpts []grpc.ServerOption
			if tc.server != nil {
				cfg, _, err := tlsutil.Server(*tc.server)
				if err != nil {
					t.Fatal(err)
				}
				serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(cfg)))
			}
			auth := &scriptedAuthority{declares: make(chan *declareCall, 16)}
			auth.answerAll(t, func(req *fencev1.DeclareClusterEpochRequest) (*fencev1.DeclareClusterEpochResponse, error) {
				return grantResp(req, testLease, 1)
			})
			addr := serveTCP(t, auth, serverOpts...)

			var clientCfg *tls.Config
			if tc.client != nil {
				if clientCfg, err = tlsutil.Client(*tc.client); err != nil {
					t.Fatal(err)
				}
			}
			conn, err := Dial(addr, clientCfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			ta := newTestAgent(t, fencev1.NewFenceServiceClient(conn), func(o *Options) { o.DeclareTimeout = 2 * time.Second })
			ta.startManual(t)

			s, err := ta.Check(context.Background())
			if tc.wantActive {
				if err != nil || s.Status != fencestate.Active {
					t.Errorf("Check = (%s, %v), want active", s.Status, err)
				}
				return
			}
			if err == nil || s.Status != fencestate.Unknown {
				t.Errorf("Check = (%s, %v), want unknown with an error", s.Status, err)
			}
			t.Logf("Check: %v", err)
		})
	}
}

// serveTCP serves srv on a loopback port until the test ends.
func serveTCP(t *testing.T, srv fencev1.FenceServiceServer, opts ...grpc.ServerOption) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(opts...)
	fencev1.RegisterFenceServiceServer(s, srv)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}
