package engine_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/policies"
)

// Fence states of the tests: east@7 holds the fence; west@3 is fenced.
var (
	eastActive = enginetest.Fence(fencestate.Active, "east", 7, "east", 7)
	westFenced = enginetest.Fence(fencestate.Fenced, "west", 3, "east", 7)
)

func newEngine(t testing.TB, opts engine.Options) *engine.Engine {
	t.Helper()
	e, err := engine.New(opts)
	if err != nil {
		t.Fatalf("engine.New: %v", err)
	}
	return e
}

func writeFence(t testing.TB, e *engine.Engine, state fencestate.State) {
	t.Helper()
	if err := e.WriteFence(context.Background(), state); err != nil {
		t.Fatalf("WriteFence: %v", err)
	}
}

// writeFile replaces a file atomically (through a hidden temporary file, as
// editors and the kubelet do), so that a watcher never reads half of it.
func writeFile(t testing.TB, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestReadyAndFence(t *testing.T) {
	e := newEngine(t, engine.Options{})
	if err := e.Ready(); !errors.Is(err, engine.ErrNotReady) {
		t.Errorf("Ready before a fence write = %v, want ErrNotReady", err)
	}
	if _, ok := e.Fence("default"); ok {
		t.Error("Fence before a fence write reports a state")
	}
	if _, err := e.Reconcile(context.Background(), "default", map[string]any{}); !errors.Is(err, engine.ErrNotReady) {
		t.Errorf("Reconcile before a fence write = %v, want ErrNotReady", err)
	}
	body := enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("billing", "default", nil)})
	res, err := e.Admit(context.Background(), body)
	if !errors.Is(err, engine.ErrNotReady) {
		t.Errorf("Admit before a fence write = %v, want ErrNotReady", err)
	}
	if res.Request.UID != "offline" || res.Request.Operation != "CREATE" {
		t.Errorf("Admit before a fence write decoded %+v, want the request", res.Request)
	}

	writeFence(t, e, westFenced)
	if err := e.Ready(); err != nil {
		t.Errorf("Ready after a fence write = %v", err)
	}
	if got, ok := e.Fence("default"); !ok || got != westFenced {
		t.Errorf("Fence = %+v, %v; want %+v", got, ok, westFenced)
	}
	if err := e.WriteFence(context.Background(), fencestate.State{}); err == nil {
		t.Error("WriteFence accepted a state without a status")
	}
	shipped, err := policies.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	if status := e.PolicyStatus(); status.Source != "embedded" || len(status.Revision) != 16 || len(status.Files) != len(shipped) || e.Revision() != status.Revision {
		t.Errorf("PolicyStatus = %+v, revision %q", status, e.Revision())
	}
}

func TestNewErrors(t *testing.T) {
	dir := func(files map[string]string) func(t *testing.T) string {
		return func(t *testing.T) string {
			d := enginetest.CopyPolicies(t)
			for name, content := range files {
				writeFile(t, filepath.Join(d, name), content)
			}
			return d
		}
	}
	config := func(content string) func(t *testing.T) string {
		return func(t *testing.T) string {
			f := filepath.Join(t.TempDir(), "config.yaml")
			writeFile(t, f, content)
			return f
		}
	}
	tests := map[string]struct {
		policyDir  func(t *testing.T) string
		configFile func(t *testing.T) string
		want       []string
	}{
		"missing policy directory": {
			policyDir: func(*testing.T) string { return "/nonexistent/policies" },
			want:      []string{"read policy directory /nonexistent/policies"},
		},
		"directory without policies": {
			policyDir: func(t *testing.T) string { return t.TempDir() },
			want:      []string{"holds no .rego files"},
		},
		"syntax error": {
			policyDir: dir(map[string]string{"broken.rego": "package fencegate.broken\n\nallow if {\n"}),
			want:      []string{"parse policies", "broken.rego:"},
		},
		"type error": {
			policyDir: dir(map[string]string{"broken.rego": "package fencegate.broken\n\nx := count(1)\n"}),
			want:      []string{"compile policies", "broken.rego:3", "count"},
		},
		"missing entry point": {
			policyDir: dir(map[string]string{"reconcile.rego": "package fencegate.reconcile\n\nreason := \"x\"\n"}),
			want:      []string{"no rule data.fencegate.reconcile.decision"},
		},
		"missing config file": {
			configFile: func(*testing.T) string { return "/nonexistent/config.yaml" },
			want:       []string{"read config file", "/nonexistent/config.yaml"},
		},
		"config not YAML": {
			configFile: config("enforcement: [deny\n"),
			want:       []string{"config.yaml: not valid YAML or JSON"},
		},
		"config not an object": {
			configFile: config("- deny\n"),
			want:       []string{"want an object of settings", "got a list"},
		},
		"unknown enforcement mode": {
			configFile: config("enforcement: block\n"),
			want:       []string{`enforcement: want one of deny, warn or dryrun, got "block"`},
		},
		"list that is not a list": {
			configFile: config("exempt_users: alice\n"),
			want:       []string{"exempt_users: want a list of names, got a string"},
		},
		"empty name": {
			configFile: config("exempt_groups: [sre, \"\"]\ncontroller_users: [1]\n"),
			want:       []string{`exempt_groups[1]: want a non-empty name, got ""`, "controller_users[0]: want a non-empty name, got 1"},
		},
		"fenced kinds that are not kinds": {
			configFile: config("fenced_kinds: [CronJob, {group: batch}, {group: 1, kind: CronJob}, {group: components.fencegate.dev, kind: Component}]\n"),
			want: []string{
				`fenced_kinds[0]: want {group, kind}, got "CronJob"`,
				"fenced_kinds[1].kind: want a kind such as CronJob, got null",
				"fenced_kinds[2].group: want an API group such as batch",
				"fenced_kinds[3]: Components are always fenced: leave them out",
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var opts engine.Options
			if tc.policyDir != nil {
				opts.PolicyDir = tc.policyDir(t)
			}
			if tc.configFile != nil {
				opts.ConfigFile = tc.configFile(t)
			}
			_, err := engine.New(opts)
			if err == nil {
				t.Fatal("engine.New succeeded")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

func TestConfigFiles(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "base.json")
	writeFile(t, base, `{"enforcement": "warn", "exempt_users": ["alice"], "team_setting": 3}`)
	override := filepath.Join(dir, "override.yaml")
	writeFile(t, override, "enforcement: dryrun\n")
	empty := filepath.Join(dir, "empty.yaml")
	writeFile(t, empty, "")

	tests := map[string]struct {
		opts        engine.Options
		user        string
		wantAllowed bool
		wantWarning string
	}{
		"no config: deny": {
			opts: engine.Options{},
		},
		"empty file: deny": {
			opts: engine.Options{ConfigFile: empty},
		},
		"JSON file: warn": {
			opts:        engine.Options{ConfigFiles: []string{base}},
			wantAllowed: true,
			wantWarning: `admitted only because enforcement is "warn"`,
		},
		"ConfigFile comes last: dryrun": {
			opts:        engine.Options{ConfigFiles: []string{base}, ConfigFile: override},
			wantAllowed: true,
		},
		"later files win: warn": {
			opts:        engine.Options{ConfigFiles: []string{override, base}},
			wantAllowed: true,
			wantWarning: `admitted only because enforcement is "warn"`,
		},
		"keys of earlier files stay": {
			opts:        engine.Options{ConfigFiles: []string{base}, ConfigFile: override},
			user:        "alice",
			wantAllowed: true,
			wantWarning: `admitted because user "alice" is exempt`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := newEngine(t, tc.opts)
			writeFence(t, e, westFenced)
			user := tc.user
			if user == "" {
				user = "bob"
			}
			res, err := e.Admit(context.Background(), enginetest.Review(t, engine.ReviewRequest{
				Operation: "CREATE", Object: enginetest.Component("billing", "default", nil), Username: user,
			}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Decision.Allowed != tc.wantAllowed {
				t.Errorf("allowed = %v, want %v (%+v)", res.Decision.Allowed, tc.wantAllowed, res.Decision)
			}
			got := strings.Join(res.Decision.Warnings, "\n")
			if (tc.wantWarning == "" && got != "") || !strings.Contains(got, tc.wantWarning) {
				t.Errorf("warnings = %q, want %q", got, tc.wantWarning)
			}
		})
	}
}

func TestConfigRevision(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yaml")
	writeFile(t, a, "enforcement: warn\n")
	writeFile(t, b, "enforcement: deny\n")
	ra := newEngine(t, engine.Options{ConfigFile: a}).Revision()
	rb := newEngine(t, engine.Options{ConfigFile: b}).Revision()
	rEmbedded := newEngine(t, engine.Options{}).Revision()
	if ra == rb || ra == rEmbedded || rb == rEmbedded {
		t.Errorf("revisions %q, %q, %q: a different config must give a different revision", ra, rb, rEmbedded)
	}
	if again := newEngine(t, engine.Options{ConfigFile: a}).Revision(); again != ra {
		t.Errorf("revision of the same files = %q, then %q", ra, again)
	}
}

func TestReconcile(t *testing.T) {
	tests := map[string]struct {
		state      fencestate.State
		wantHold   bool
		wantReason string
		wantIn     string
	}{
		"active": {
			state: eastActive, wantHold: false, wantReason: "FenceHeld",
			wantIn: `cluster "east" holds the ownership fence of domain "default" at epoch 7 (fencing token 1042).`,
		},
		"fenced": {
			state: westFenced, wantHold: true, wantReason: "ClusterFenced",
			wantIn: `cluster "west" (epoch 3) does not hold the ownership fence`,
		},
		"epoch regressed": {
			state:    enginetest.Fence(fencestate.EpochRegressed, "west", 3, "east", 7),
			wantHold: true, wantReason: "ClusterEpochRegressed", wantIn: "lower than an epoch it declared before",
		},
		"acquiring": {
			state:    enginetest.Fence(fencestate.Acquiring, "west", 8, "east", 7),
			wantHold: true, wantReason: "FenceAcquiring", wantIn: "is taking over",
		},
		"unknown": {
			state:    enginetest.Fence(fencestate.Unknown, "west", 3, "", 0),
			wantHold: true, wantReason: "FenceUnknown", wantIn: "no holder is known",
		},
		"unsupported": {
			state:    enginetest.Fence(fencestate.Unsupported, "west", 3, "", 0),
			wantHold: true, wantReason: "FenceUnknown", wantIn: "does not implement the fence protocol",
		},
	}
	e := newEngine(t, engine.Options{})
	component := map[string]any{
		"apiVersion": "components.fencegate.dev/v1alpha1", "kind": "Component",
		"metadata": map[string]any{"name": "billing", "namespace": "default", "generation": int64(3)},
		"spec":     map[string]any{"enabled": true, "values": map[string]any{"replicas": 2.5}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			writeFence(t, e, tc.state)
			d, err := e.Reconcile(context.Background(), "default", component)
			if err != nil {
				t.Fatal(err)
			}
			if d.Hold != tc.wantHold || d.Reason != tc.wantReason || !strings.Contains(d.Message, tc.wantIn) {
				t.Errorf("decision = %+v; want hold %v, reason %s, message containing %q", d, tc.wantHold, tc.wantReason, tc.wantIn)
			}
		})
	}
}

// TestLeaseExpiry checks the engine's safety belt: an active state whose
// validity has passed is decided as unknown, by both entry points.
func TestLeaseExpiry(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	e := newEngine(t, engine.Options{Clock: clock})
	state := eastActive
	state.ValidUntilNS = clock.Now().Add(10 * time.Second).UnixNano()
	writeFence(t, e, state)
	body := enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("billing", "default", nil)})

	steps := map[string]struct {
		at          time.Duration
		wantAllowed bool
		wantStatus  fencestate.Status
		wantReason  string
	}{
		"1 before expiry": {at: 9 * time.Second, wantAllowed: true, wantStatus: fencestate.Active, wantReason: "FenceHeld"},
		"2 at expiry":     {at: 10 * time.Second, wantAllowed: false, wantStatus: fencestate.Unknown, wantReason: "FenceUnknown"},
		"3 after expiry":  {at: time.Minute, wantAllowed: false, wantStatus: fencestate.Unknown, wantReason: "FenceUnknown"},
	}
	for _, name := range []string{"1 before expiry", "2 at expiry", "3 after expiry"} {
		step := steps[name]
		t.Run(name, func(t *testing.T) {
			clock.SetTime(time.Unix(0, state.ValidUntilNS).Add(step.at - 10*time.Second))
			res, err := e.Admit(context.Background(), body)
			if err != nil {
				t.Fatal(err)
			}
			if res.Decision.Allowed != step.wantAllowed || res.Fence.Status != step.wantStatus {
				t.Errorf("allowed %v with status %s; want %v with %s (%+v)", res.Decision.Allowed, res.Fence.Status, step.wantAllowed, step.wantStatus, res.Decision)
			}
			if !step.wantAllowed && !strings.Contains(strings.Join(res.Decision.Reasons, ""), "was valid until 2026-03-01T12:00:10Z and was not renewed") {
				t.Errorf("reasons %q do not say that the lease expired", res.Decision.Reasons)
			}
			if fence, _ := e.Fence("default"); fence.Status != step.wantStatus {
				t.Errorf("Fence().Status = %s, want %s", fence.Status, step.wantStatus)
			}
			d, err := e.Reconcile(context.Background(), "default", map[string]any{})
			if err != nil || d.Reason != step.wantReason {
				t.Errorf("Reconcile = %+v, %v; want reason %s", d, err, step.wantReason)
			}
		})
	}
}

func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	newEngine(t, engine.Options{Registerer: reg})
	if got := enginetest.Reloads(t, reg, "error"); got != 0 {
		t.Errorf("reload errors after a good start = %v", got)
	}
	if _, err := engine.New(engine.Options{Registerer: reg}); err == nil {
		t.Error("a second engine registered the same metrics on the same registry")
	}
}
