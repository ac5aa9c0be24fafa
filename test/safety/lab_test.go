package safety

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/authority/authoritytest"
	"github.com/fencegate/fencegate/internal/testcerts"
)

// The identities of a history's callers besides the clusters: the operator
// who revokes and forgets, a caller the authorization file does not know,
// and a cluster bound to its own name that declares epochs out of step.
const (
	operatorID = "spiffe://safety.test/operator"
	intruderID = "spiffe://safety.test/intruder"
	rogueID    = "spiffe://safety.test/cluster/rogue"
	rogueName  = "rogue"
)

// clusterID is the identity of a cluster's pods.
func clusterID(name string) string { return "spiffe://safety.test/cluster/" + name }

// lab is the authority of the histories, as production runs it: mTLS, an
// authorization file that binds each cluster's identity to its name, and
// replicas on one etcd, each with its own wall clock and the machine's
// monotonic clock.
type lab struct {
	*authoritytest.Server
	ca *testcerts.CA
	// addrs are the replicas' addresses, the first one's first; clocks
	// their wall clocks, which the clock nemesis sets apart and steps.
	addrs  []string
	clocks []*offsetClock
}

// startLab starts the authority with replicas replicas (1 or more).
func startLab(t *testing.T, opts authoritytest.Options, replicas int) *lab {
	t.Helper()
	ca, serving, err := testcerts.Loopback("safety-ca")
	if err != nil {
		t.Fatal(err)
	}
	serverTLS, err := ca.MutualTLS(serving)
	if err != nil {
		t.Fatal(err)
	}
	var file strings.Builder
	file.WriteString("clusters:\n")
	for _, name := range append(clusterNames[:len(clusterNames):len(clusterNames)], rogueName) {
		fmt.Fprintf(&file, "  - {identity: %q, cluster: %s, domains: [\"*\"]}\n", clusterID(name), name)
	}
	fmt.Fprintf(&file, "operators: [%q]\n", operatorID)
	path := filepath.Join(t.TempDir(), "authorization.yaml")
	if err := os.WriteFile(path, []byte(file.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	opts.TLS = serverTLS
	opts.AuthorizationFile = path
	l := &lab{ca: ca}
	for range replicas {
		l.clocks = append(l.clocks, &offsetClock{})
	}
	// The replicas judge lease ends on the real monotonic clock, as a
	// replica does whose wall clock is set or stepped: without it they
	// would judge them on the wall clocks the nemesis moves.
	start := time.Now()
	monotonic := func() time.Duration { return time.Since(start) }
	opts.Clock, opts.Monotonic = l.clocks[0], monotonic
	l.Server = authoritytest.Start(t, opts)
	l.addrs = []string{l.Addr}
	for _, clk := range l.clocks[1:] {
		l.addrs = append(l.addrs, l.AddReplica(t, authoritytest.ReplicaOptions{Clock: clk, Monotonic: monotonic}).Addr)
	}
	return l
}

// clientTLS is the TLS configuration of a caller with identity.
func (l *lab) clientTLS(t testing.TB, identity string) *tls.Config {
	t.Helper()
	cfg, err := l.ca.ClientTLS(identity)
	if err != nil {
		t.Fatal(err)
	}
	// The agents dial their proxies, not the authority's address.
	cfg.ServerName = "127.0.0.1"
	return cfg
}
