package main

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/fencegate/fencegate/internal/cli/clitest"
)

// TestLinksNoAuthority keeps the fence authority and etcd out of the binary
// a cluster runs: what fencegate links, it pages in at start. Of the
// authority it may use only the state machine's limits (failover checks an
// epoch's step against them before raising it).
func TestLinksNoAuthority(t *testing.T) {
	if testing.Short() {
		t.Skip("lists the binary's packages with the go command")
	}
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/fencegate/fencegate/engine") {
		t.Fatalf("go list names no engine among fencegate's %d packages: not the list of fencegate's packages", len(deps))
	}
	for _, dep := range deps {
		authority := strings.HasPrefix(dep, "github.com/fencegate/fencegate/authority") && dep != "github.com/fencegate/fencegate/authority/statemachine"
		if authority || strings.HasPrefix(dep, "go.etcd.io/") {
			t.Errorf("fencegate links %s: the authority's packages belong in fencegate-authority", dep)
		}
	}
}

// TestAuthorityMoved: `fencegate authority`, with any flags, says where the
// authority went instead of an unknown command.
func TestAuthorityMoved(t *testing.T) {
	for name, args := range map[string][]string{
		"no flags":   {"authority"},
		"its flags":  {"authority", "--listen", "0.0.0.0:7443", "--data-dir", "/var/lib/fencegate"},
		"help asked": {"authority", "--help"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := clitest.Execute(context.Background(), newRootCommand(), args...)
			if err == nil || !strings.Contains(err.Error(), "run fencegate-authority, with the same flags") {
				t.Fatalf("error %v, want where the authority went", err)
			}
		})
	}
}
