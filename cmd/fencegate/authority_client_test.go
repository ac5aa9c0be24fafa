package main

import (
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/tlsutil"
)

func TestAuthorityClientTransport(t *testing.T) {
	tests := map[string]struct {
		opts      authorityClientOptions
		wantTLS   bool
		wantError string
	}{
		"loopback IP without TLS flags: plaintext": {opts: authorityClientOptions{address: "127.0.0.1:7443"}},
		"localhost without TLS flags: plaintext":   {opts: authorityClientOptions{address: "localhost:7443"}},
		"IPv6 loopback: plaintext":                 {opts: authorityClientOptions{address: "[::1]:7443"}},
		"remote address: TLS with system roots":    {opts: authorityClientOptions{address: "authority.example.com:7443"}, wantTLS: true},
		"remote address, insecure: plaintext":      {opts: authorityClientOptions{address: "10.0.0.5:7443", insecure: true}},
		"loopback with a server name: TLS": {
			opts: authorityClientOptions{address: "127.0.0.1:7443", tls: tlsutil.ClientFiles{ServerName: "authority"}}, wantTLS: true,
		},
		"insecure with TLS flags": {
			opts:      authorityClientOptions{address: "10.0.0.5:7443", insecure: true, tls: tlsutil.ClientFiles{CAFile: "ca.crt"}},
			wantError: "--authority-insecure turns TLS off",
		},
		"no address":           {opts: authorityClientOptions{}, wantError: "--authority: the address of the fence authority is required"},
		"address without port": {opts: authorityClientOptions{address: "authority"}, wantError: `--authority "authority": want host:port`},
		"certificate without key": {
			opts: authorityClientOptions{address: "10.0.0.5:7443", tls: tlsutil.ClientFiles{CertFile: "c.crt"}}, wantError: "a client certificate needs both",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			cfg, err := tc.opts.tlsConfig()
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantError)
				}
				return
			}
			if err != nil {
				t.Fatalf("tlsConfig: %v", err)
			}
			if got := cfg != nil; got != tc.wantTLS {
				t.Errorf("TLS %v, want %v", got, tc.wantTLS)
			}
		})
	}
}
