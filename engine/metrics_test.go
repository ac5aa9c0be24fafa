package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
)

// TestPolicyStatusMetrics: the revision in force and whether the last
// reload worked follow each reload, so an alert can tell a broken policy
// that still waits for a fix from one that was fixed since.
func TestPolicyStatusMetrics(t *testing.T) {
	dir := enginetest.CopyPolicies(t)
	broken := filepath.Join(dir, "broken.rego")
	reg := prometheus.NewPedanticRegistry()
	e := newEngine(t, engine.Options{PolicyDir: dir, Registerer: reg})
	first := e.Revision()

	steps := []struct {
		name       string
		change     func()
		reloadErr  bool
		newVersion bool
		worked     int
	}{
		{name: "first load", change: func() {}, worked: 1},
		{name: "a broken file", change: func() { writeFile(t, broken, "package fencegate.broken\n\nallow if {\n") }, reloadErr: true, worked: 0},
		{name: "reloaded again, still broken", change: func() {}, reloadErr: true, worked: 0},
		{name: "the break undone", change: func() {
			if err := os.Remove(broken); err != nil {
				t.Fatal(err)
			}
		}, worked: 1},
		{name: "a good new file", change: func() { writeFile(t, filepath.Join(dir, "extra.rego"), "package fencegate.extra\n") }, newVersion: true, worked: 1},
	}
	for _, step := range steps {
		step.change()
		if err := e.Reload(context.Background()); (err != nil) != step.reloadErr {
			t.Fatalf("%s: Reload = %v, want an error: %v", step.name, err, step.reloadErr)
		}
		if got := e.Revision(); (got != first) != step.newVersion {
			t.Errorf("%s: revision %s, first %s; want a new one: %v", step.name, got, first, step.newVersion)
		}
		want := fmt.Sprintf(`
# HELP fencegate_policy_last_reload_successful 1 if the last policy reload put its revision in force (or none was tried since the start), 0 if it failed and the last good revision still serves.
# TYPE fencegate_policy_last_reload_successful gauge
fencegate_policy_last_reload_successful %d
# HELP fencegate_policy_revision_info The policy revision in force (a hash of the policies and config), as a label; the value is 1.
# TYPE fencegate_policy_revision_info gauge
fencegate_policy_revision_info{revision=%q} 1
`, step.worked, e.Revision())
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"fencegate_policy_last_reload_successful", "fencegate_policy_revision_info"); err != nil {
			t.Errorf("%s: %v", step.name, err)
		}
	}
}
