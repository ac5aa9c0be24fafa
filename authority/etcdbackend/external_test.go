package etcdbackend_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authority/etcdbackend"
	"github.com/fencegate/fencegate/internal/tlsutil"
)

func TestDialErrors(t *testing.T) {
	// A port that was free a moment ago: nothing answers there.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + lis.Addr().String()
	_ = lis.Close()

	tests := map[string]struct {
		opts    etcdbackend.ExternalOptions
		wantErr string
	}{
		"no endpoints": {
			wantErr: "no etcd endpoints given",
		},
		"client certificate without its key": {
			opts:    etcdbackend.ExternalOptions{Endpoints: []string{closed}, TLS: tlsutil.ClientFiles{CertFile: "client.crt"}},
			wantErr: "etcd client TLS: a client certificate needs both a certificate file and a key file",
		},
		"missing CA file": {
			opts:    etcdbackend.ExternalOptions{Endpoints: []string{closed}, TLS: tlsutil.ClientFiles{CAFile: "/nonexistent/ca.crt"}},
			wantErr: "etcd client TLS: read CA file",
		},
		"nothing answers": {
			opts:    etcdbackend.ExternalOptions{Endpoints: []string{closed}},
			wantErr: "etcd at " + closed + " does not answer",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			client, err := etcdbackend.Dial(ctx, tc.opts)
			if err == nil {
				_ = client.Close()
				t.Fatal("Dial succeeded")
			}
			if !strings.HasPrefix(err.Error(), tc.wantErr) {
				t.Errorf("error %q, want it to start with %q", err, tc.wantErr)
			}
		})
	}
}
