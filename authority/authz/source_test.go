package authz

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestSourceKeepsTheLastGoodFile: a file that no longer parses leaves the
// last good policy in force and says so in the status and the metrics; a
// fixed file is in force again.
func TestSourceKeepsTheLastGoodFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "authorization.yaml")
	write(t, path, testFile)
	reg := prometheus.NewRegistry()
	src, err := NewSource(path, SourceOptions{Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	first := src.Status()
	if first.Revision == "" || first.Error != "" {
		t.Fatalf("status after the first load = %+v", first)
	}
	allowed := func(id string) bool {
		return src.Policy().Authorize(id, Request{Method: MethodGet, Domain: "default"}).Allowed
	}
	if !allowed(boardID) {
		t.Fatal("the reader of the first file is refused")
	}

	write(t, path, "clusters: [")
	if err := src.Reload(); err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("Reload of a broken file = %v, want an error naming the file", err)
	}
	st := src.Status()
	if st.Revision != first.Revision || !strings.Contains(st.Error, "parse authorization file") || st.FailedAt.IsZero() {
		t.Errorf("status after a broken reload = %+v, want revision %s in force and the error", st, first.Revision)
	}
	if !allowed(boardID) {
		t.Error("the broken file took the reader's role away: the last good file must stay in force")
	}
	if got := testutil.ToFloat64(src.metrics.lastSuccess); got != 0 {
		t.Errorf("last_reload_successful = %v, want 0", got)
	}
	if got := testutil.ToFloat64(src.metrics.reloads.WithLabelValues("error")); got != 1 {
		t.Errorf("error reloads = %v, want 1", got)
	}

	write(t, path, "readers: ["+westID+"]\n")
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if st := src.Status(); st.Error != "" || st.Revision == first.Revision {
		t.Errorf("status after the fix = %+v", st)
	}
	if allowed(boardID) || !allowed(westID) {
		t.Error("the fixed file is not in force")
	}
	if got := testutil.ToFloat64(src.metrics.lastSuccess); got != 1 {
		t.Errorf("last_reload_successful = %v, want 1", got)
	}

	if _, err := NewSource(filepath.Join(t.TempDir(), "missing.yaml"), SourceOptions{}); err == nil {
		t.Error("a source of a missing file started")
	}
}

// TestSourceFollowsAConfigMapSwap: the kubelet updates a ConfigMap volume by
// swapping a symbolic link; the watch sees it and reloads.
func TestSourceFollowsAConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	for _, v := range []string{"v1", "v2"} {
		if err := os.Mkdir(filepath.Join(dir, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(t, filepath.Join(dir, "v1", "authorization.yaml"), "readers: ["+boardID+"]\n")
	write(t, filepath.Join(dir, "v2", "authorization.yaml"), "readers: ["+westID+"]\n")
	link := func(target string) {
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(target, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	link("v1")
	if err := os.Symlink("..data/authorization.yaml", filepath.Join(dir, "authorization.yaml")); err != nil {
		t.Fatal(err)
	}
	src, err := NewSource(filepath.Join(dir, "authorization.yaml"), SourceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- src.Start(ctx) }()
	reads := func(id string) bool {
		return src.Policy().Authorize(id, Request{Method: MethodGet, Domain: "default"}).Allowed
	}
	if !reads(boardID) {
		t.Fatal("the first revision is not in force")
	}
	link("v2")
	deadline := time.Now().Add(10 * time.Second)
	for !reads(westID) {
		if time.Now().After(deadline) {
			t.Fatal("the swapped file was not loaded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Start: %v", err)
	}
}

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestSourceTellsTheReplacedPolicy: a policy is told when a reload puts
// another in force, so that what it allowed is decided again; a reload of
// the same content or of a broken file leaves it in force and untold.
func TestSourceTellsTheReplacedPolicy(t *testing.T) {
	path := filepath.Join(t.TempDir(), "authorization.yaml")
	write(t, path, testFile)
	src, err := NewSource(path, SourceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	replaced := func(p *Policy) bool {
		select {
		case <-p.Replaced():
			return true
		default:
			return false
		}
	}
	first := src.Policy()
	for _, content := range []string{testFile, "clusters: ["} {
		write(t, path, content)
		_ = src.Reload()
		if replaced(first) || src.Policy() != first {
			t.Fatalf("a reload of %q replaced the policy in force", content)
		}
	}
	write(t, path, "readers: ["+westID+"]\n")
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if !replaced(first) {
		t.Error("the replaced policy was not told")
	}
	if replaced(src.Policy()) {
		t.Error("the policy in force is told it was replaced")
	}
}
