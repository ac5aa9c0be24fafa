package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/webhook"
)

// TestPolicyHotReload edits the policies of a serving webhook: the API
// server's next call follows the edit; a policy that does not compile leaves
// the last good one in force and shows on /status/policy and /metrics.
func TestPolicyHotReload(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := enginetest.CopyPolicies(t)
	env := startAdmission(ctx, t, engine.Options{PolicyDir: dir, ReloadDelay: 50 * time.Millisecond}, westFenced)

	applyStderr := func() string {
		t.Helper()
		res, err := env.cp.Kubectl(ctx, []byte(componentYAML), "apply", "--dry-run=server", "-f", "-")
		if err != nil {
			t.Fatal(err)
		}
		return res.Stderr
	}
	if got := applyStderr(); !strings.Contains(got, westFencedDenial) {
		t.Fatalf("before the edit kubectl printed %q", got)
	}

	t.Run("the next decision follows an edited policy", func(t *testing.T) {
		admission := filepath.Join(dir, "admission.rego")
		src, err := os.ReadFile(admission)
		if err != nil {
			t.Fatal(err)
		}
		edited := strings.Replace(string(src), `denial := concat("", ["fencegate: ", kind_clause, ownership.explanation])`,
			`denial := concat("", ["fencegate (edited policy): ", kind_clause, ownership.explanation])`, 1)
		if edited == string(src) {
			t.Fatal("admission.rego has no denial rule to edit")
		}
		replaceFile(t, admission, []byte(edited))
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(applyStderr(), "fencegate (edited policy): ") {
			if time.Now().After(deadline) {
				t.Fatal("the edited policy never decided")
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("a broken policy leaves the last good one in force, visibly", func(t *testing.T) {
		good := env.engine.Revision()
		replaceFile(t, filepath.Join(dir, "broken.rego"), []byte("package fencegate.broken\n\ndeny contains msg if {\n"))
		var status engine.PolicyStatus
		deadline := time.Now().Add(30 * time.Second)
		for status.LastReload == nil || status.LastReload.Result != "error" {
			if time.Now().After(deadline) {
				t.Fatalf("the reload error never showed on %s: %+v", webhook.PathPolicyStatus, status)
			}
			time.Sleep(50 * time.Millisecond)
			code, body := env.get(t, webhook.PathPolicyStatus)
			if code != 200 || json.Unmarshal([]byte(body), &status) != nil {
				t.Fatalf("GET %s = %d %s", webhook.PathPolicyStatus, code, body)
			}
		}
		if status.Revision != good || !strings.Contains(status.LastReload.Error, "broken.rego:4") {
			t.Errorf("policy status = %+v; want revision %s and the compiler's message", status, good)
		}
		if got := enginetest.Reloads(t, env.reg, "error"); got != 1 {
			t.Errorf("fencegate_policy_reloads_total{result=\"error\"} = %v, want 1", got)
		}
		if got := applyStderr(); !strings.Contains(got, "fencegate (edited policy): ") {
			t.Errorf("after the broken edit kubectl printed %q, want the last good policy's denial", got)
		}
	})
}

// replaceFile writes a file atomically, as the kubelet and editors do.
func replaceFile(t *testing.T, path string, content []byte) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, content, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
