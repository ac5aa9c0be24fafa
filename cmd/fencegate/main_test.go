package main

import (
	"context"
	"debug/elf"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/internal/cli/clitest"
	"github.com/fencegate/fencegate/test/stack"
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

// TestKeepsUnusedMethodsOut checks the binary the image carries for the
// known ways to make the linker keep every exported method of every type
// it links (a sixth of fencegate's code): gRPC's tracing, which
// hack/build-fencegate.sh builds without, and a template that may run,
// since a template calls methods by name. Any call of a method by a name
// known only at run time does the same; -dumpdep marks each
// <ReflectMethod>.
func TestKeepsUnusedMethodsOut(t *testing.T) {
	if testing.Short() {
		t.Skip("links or reads the fencegate binary")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := stack.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	symbols, err := f.Symbols()
	if err != nil {
		t.Fatalf("symbols of %s (build it with hack/build-fencegate.sh, which keeps them): %v", bin, err)
	}
	if len(symbols) < 1000 {
		t.Fatalf("%s has %d symbols: not a Go binary's table", bin, len(symbols))
	}
	var found []string
	for _, sym := range symbols {
		if sym.Name == "text/template.(*state).evalField" || strings.HasPrefix(sym.Name, "golang.org/x/net/trace.") {
			found = append(found, sym.Name)
		}
	}
	if len(found) > 0 {
		t.Errorf("%s links %d symbols of gRPC's tracing or a template's method calls, %s first: every exported method stays in the binary; `go build -tags grpcnotrace -ldflags=-dumpdep -o /dev/null ./cmd/fencegate 2>&1 | grep ReflectMethod` names them",
			bin, len(found), found[0])
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
