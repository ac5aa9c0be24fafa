package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/internal/cli/clitest"
	"github.com/fencegate/fencegate/internal/testcerts"
)

func TestAuthorityFlagErrors(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		"plaintext on every interface": {
			args:    []string{"--listen", ":7443"},
			wantErr: "--listen :7443 is not a loopback address: serve TLS with --tls-cert and --tls-key, or pass --insecure to serve plaintext anyway",
		},
		"plaintext on a public address": {
			args:    []string{"--listen", "10.1.2.3:7443"},
			wantErr: "--listen 10.1.2.3:7443 is not a loopback address",
		},
		"listen address without port": {args: []string{"--listen", "localhost"}, wantErr: `--listen "localhost": want host:port`},
		"certificate without key":     {args: []string{"--tls-cert", "tls.crt"}, wantErr: "--tls-cert and --tls-key go together"},
		"client CA without TLS":       {args: []string{"--client-ca", "ca.crt"}, wantErr: "--client-ca needs TLS"},
		"both stores": {
			args:    []string{"--etcd-endpoints", "https://etcd:2379", "--data-dir", "/var/lib/x"},
			wantErr: "--data-dir is for the embedded etcd and --etcd-endpoints for an external one: give one of them",
		},
		"etcd TLS without endpoints": {args: []string{"--etcd-ca", "ca.crt"}, wantErr: "--etcd-ca, --etcd-cert and --etcd-key need --etcd-endpoints"},
		"lease too short":            {args: []string{"--lease-ttl", "100ms"}, wantErr: "--lease-ttl 100ms: want at least 1s"},
		"lease from the environment": {env: map[string]string{"FENCEGATE_LEASE_TTL": "200ms"}, wantErr: "--lease-ttl 200ms: want at least 1s"},
		"bad metrics address":        {args: []string{"--metrics-address", "7444"}, wantErr: `--metrics-address "7444": want host:port`},
		"client certificates but no roles": {
			args:    []string{"--tls-cert", "tls.crt", "--tls-key", "tls.key", "--client-ca", "ca.crt"},
			wantErr: "--client-ca without --authorization-file: give the file that binds client identities to roles, or --authorization=none",
		},
		"roles but no client certificates": {
			args:    []string{"--authorization-file", "authorization.yaml"},
			wantErr: "--authorization-file needs --client-ca",
		},
		"reachable from other machines, no roles": {
			args:    []string{"--listen", "0.0.0.0:7443", "--insecure"},
			wantErr: "--listen 0.0.0.0:7443 is reachable from other machines but no --authorization-file says who may call",
		},
		"none and a file": {
			args:    []string{"--authorization", "none", "--authorization-file", "a.yaml"},
			wantErr: "--authorization=none and --authorization-file contradict each other",
		},
		"an unknown authorization mode": {args: []string{"--authorization", "all"}, wantErr: `--authorization "all": the one value is "none"`},
		"a zero epoch step":             {args: []string{"--max-epoch-step", "0"}, wantErr: "--max-epoch-step 0: want at least 1"},
		"no history":                    {args: []string{"--history-limit", "0"}, wantErr: "--history-limit 0: want at least 66"},
		"a file that does not parse": {
			args: []string{"--tls-cert", "TLSCERT", "--tls-key", "TLSKEY", "--client-ca", "CA", "--authorization-file", "BROKEN",
				"--data-dir", "DATA", "--metrics-address", ""},
			wantErr: "--authorization-file: ",
		},
	}
	files := authorityFiles(t)
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := slices.Clone(tc.args)
			for i, a := range args {
				if f, ok := files[a]; ok {
					args[i] = f
				}
			}
			_, _, err := clitest.Execute(context.Background(), newRootCommand(), args...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

// authorityFiles writes what the flag tests name in place of files: TLS
// files, a CA, an authorization file that does not parse, a data directory.
func authorityFiles(t *testing.T) map[string]string {
	t.Helper()
	dir := t.TempDir()
	_, caFile, cert, key := authorityTLSFiles(t, dir)
	broken := filepath.Join(dir, "authorization.yaml")
	if err := os.WriteFile(broken, []byte("clusters: ["), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{"CA": caFile, "TLSCERT": cert, "TLSKEY": key, "BROKEN": broken, "DATA": filepath.Join(dir, "data")}
}

// authorityTLSFiles writes into dir a new CA (ca.crt) and a loopback
// serving pair it signed (server.crt, server.key), and returns the CA, for
// client certificates, and the files' paths.
func authorityTLSFiles(t *testing.T, dir string) (ca *testcerts.CA, caFile, certFile, keyFile string) {
	t.Helper()
	ca, server, err := testcerts.Loopback("authority-ca")
	if err != nil {
		t.Fatal(err)
	}
	if caFile, err = ca.WriteCA(dir, "ca"); err != nil {
		t.Fatal(err)
	}
	if certFile, keyFile, err = server.WriteFiles(dir, "server"); err != nil {
		t.Fatal(err)
	}
	return ca, caFile, certFile, keyFile
}

// freeAddress returns a loopback address that was free a moment ago.
func freeAddress(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	if err := lis.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// startAuthorityCommand runs `fencegate-authority args...` until the test
// ends or stop is called, and waits until /readyz answers.
func startAuthorityCommand(t *testing.T, metrics string, args ...string) (stop func() (string, error)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		stderr string
		err    error
	}
	done := make(chan result, 1)
	go func() {
		_, stderr, err := clitest.Execute(ctx, newRootCommand(), append([]string{"--metrics-address", metrics}, args...)...)
		done <- result{stderr, err}
	}()
	var stopped *result
	stop = func() (string, error) {
		if stopped == nil {
			cancel()
			r := <-done
			stopped = &r
		}
		return stopped.stderr, stopped.err
	}
	t.Cleanup(func() { _, _ = stop() })

	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case r := <-done:
			stopped = &r
			t.Fatalf("the authority command ended: %v\n%s", r.err, r.stderr)
		default:
		}
		if status, _ := httpGet("http://" + metrics + "/readyz"); status == http.StatusOK {
			return stop
		}
		if time.Now().After(deadline) {
			t.Fatal("the authority command did not become ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url) //nolint:gosec // a loopback URL the test built
	if err != nil {
		return 0, err.Error()
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestAuthorityCommandServesAndKeepsItsData(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	listen, metrics := freeAddress(t), freeAddress(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	stop := startAuthorityCommand(t, metrics, "--listen", listen, "--data-dir", dataDir, "--lease-ttl", "1m", "--log-format", "console")
	conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	client := fencev1.NewFenceServiceClient(conn)
	granted, err := client.DeclareClusterEpoch(ctx, &fencev1.DeclareClusterEpochRequest{ClusterName: "east", ClusterUid: "uid-east", Epoch: 4})
	if err != nil {
		t.Fatalf("declare: %v", err)
	}
	if got := granted.GetLeaseTtl().AsDuration(); got != time.Minute {
		t.Errorf("lease TTL %s, want the --lease-ttl 1m", got)
	}
	health, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || health.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("gRPC health %v, %v; want SERVING", health.GetStatus(), err)
	}
	if status, body := httpGet("http://" + metrics + "/metrics"); status != http.StatusOK ||
		!strings.Contains(body, `fencegate_authority_declarations_total{result="ok"} 1`) ||
		!strings.Contains(body, `fencegate_log_lines_dropped_total{level="info"} 0`) {
		t.Errorf("/metrics answered %d without the declaration or the log's dropped lines:\n%s", status, body)
	}
	if status, _ := httpGet("http://" + metrics + "/healthz"); status != http.StatusOK {
		t.Errorf("/healthz answered %d", status)
	}

	stderr, err := stop()
	if err != nil {
		t.Fatalf("the authority command ended with %v after SIGTERM's cancellation\n%s", err, stderr)
	}
	for _, want := range []string{
		fmt.Sprintf(`fence authority serving	{"address": "%s", "transport": "plaintext", "leaseTTL": "1m0s", "store": "embedded etcd", "dataDir": "%s"}`, listen, dataDir),
		`"kind": "first"`,
		"fence authority stopped",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("log lacks %q:\n%s", want, stderr)
		}
	}

	// Started again on the same data, it still knows the holder and token.
	startAuthorityCommand(t, metrics, "--listen", listen, "--data-dir", dataDir)
	got, err := client.GetFence(ctx, &fencev1.GetFenceRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if h := got.GetFence().GetHolder(); h.GetClusterName() != "east" || h.GetToken() != granted.GetToken() {
		t.Errorf("holder after restart %v, want east with token %d", h, granted.GetToken())
	}
}

// TestAuthorityCommandMutualTLS serves with --tls-cert, --tls-key and
// --client-ca: only a client that trusts the authority's CA, checks its
// name and presents a certificate the CA signed is answered.
func TestAuthorityCommandMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA("authority-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile, err := ca.WriteCA(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("authority.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	serverCert, serverKey, err := server.WriteFiles(dir, "server")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Client("east")
	if err != nil {
		t.Fatal(err)
	}
	clientTLS, err := ca.ClientConfig(client)
	if err != nil {
		t.Fatal(err)
	}
	other, err := testcerts.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	untrusted, err := other.ClientConfig(client)
	if err != nil {
		t.Fatal(err)
	}
	listen, metrics := freeAddress(t), freeAddress(t)
	startAuthorityCommand(t, metrics, "--listen", listen, "--data-dir", filepath.Join(dir, "data"),
		"--tls-cert", serverCert, "--tls-key", serverKey, "--client-ca", caFile, "--authorization", "none")

	withServerName := func(name string) credentials.TransportCredentials {
		cfg := clientTLS.Clone()
		cfg.ServerName = name
		return credentials.NewTLS(cfg)
	}
	tests := map[string]struct {
		creds   credentials.TransportCredentials
		wantErr bool
	}{
		"client certificate":      {creds: credentials.NewTLS(clientTLS)},
		"checked server name":     {creds: withServerName("authority.test")},
		"wrong server name":       {creds: withServerName("other.test"), wantErr: true},
		"no client certificate":   {creds: credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}), wantErr: true},
		"untrusted server":        {creds: credentials.NewTLS(untrusted), wantErr: true},
		"plaintext to TLS server": {creds: insecure.NewCredentials(), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			conn, err := grpc.NewClient(listen, grpc.WithTransportCredentials(tc.creds))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			_, err = fencev1.NewFenceServiceClient(conn).GetFence(ctx, &fencev1.GetFenceRequest{})
			if tc.wantErr {
				if err == nil {
					t.Fatal("the authority answered")
				}
				t.Logf("refused as expected: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("get the fence: %v", err)
			}
		})
	}
}
