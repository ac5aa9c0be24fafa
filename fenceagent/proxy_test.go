package fenceagent

import (
	"testing"

	"github.com/fencegate/fencegate/internal/tcpproxy"
)

// startProxy forwards to target until the test ends; cutting it with
// tcpproxy.Drop partitions the agent from the authority.
func startProxy(t testing.TB, target string) *tcpproxy.Proxy {
	t.Helper()
	p, err := tcpproxy.Start(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}
