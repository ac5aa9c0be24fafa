package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/testrun"
)

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startEngine starts the engine's hot reload until the test ends.
func startEngine(t *testing.T, e *engine.Engine) {
	t.Helper()
	testrun.Start(t, context.Background(), "Start", e.Start)
}

// createAllowed reports whether a CREATE of a Component is admitted.
func createAllowed(t *testing.T, e *engine.Engine) bool {
	t.Helper()
	res, err := e.Admit(context.Background(), enginetest.Review(t, engine.ReviewRequest{
		Operation: "CREATE", Object: enginetest.Component("billing", "default", nil),
	}))
	if err != nil {
		t.Fatalf("Admit: %v", err)
	}
	return res.Decision.Allowed
}

// syncLog collects log lines for assertions.
type syncLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *syncLog) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *syncLog) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func TestHotReload(t *testing.T) {
	dir := enginetest.CopyPolicies(t)
	settingsFile := filepath.Join(dir, "settings.rego")
	original, err := os.ReadFile(settingsFile)
	if err != nil {
		t.Fatal(err)
	}
	warnByDefault := strings.Replace(string(original), `default enforcement := "deny"`, `default enforcement := "warn"`, 1)
	if warnByDefault == string(original) {
		t.Fatal("settings.rego has no default enforcement to change")
	}
	reg := prometheus.NewPedanticRegistry()
	logs := &syncLog{}
	e := newEngine(t, engine.Options{
		PolicyDir: dir, Registerer: reg, ReloadDelay: 20 * time.Millisecond,
		Logger: funcr.New(logs.add, funcr.Options{}),
	})
	writeFence(t, e, westFenced)
	startEngine(t, e)
	first := e.Revision()
	if createAllowed(t, e) {
		t.Fatal("a fenced cluster admits a create")
	}

	t.Run("a changed policy decides the next request", func(t *testing.T) {
		writeFile(t, settingsFile, warnByDefault)
		eventually(t, "the new policy decides", func() bool { return createAllowed(t, e) })
		status := e.PolicyStatus()
		if status.Revision == first || status.LastReload == nil || status.LastReload.Result != "success" || status.LastReload.Revision != status.Revision {
			t.Errorf("status after a good reload = %+v", status)
		}
		if got := enginetest.Reloads(t, reg, "success"); got != 1 {
			t.Errorf("successful reloads = %v, want 1", got)
		}
	})

	t.Run("a broken policy leaves the last good one in force", func(t *testing.T) {
		good := e.Revision()
		writeFile(t, filepath.Join(dir, "broken.rego"), "package fencegate.broken\n\nallow if {\n")
		eventually(t, "the reload fails", func() bool {
			last := e.PolicyStatus().LastReload
			return last != nil && last.Result == "error"
		})
		status := e.PolicyStatus()
		if status.Revision != good {
			t.Errorf("active revision = %s, want the last good %s", status.Revision, good)
		}
		if !strings.Contains(status.LastReload.Error, "broken.rego:4") || status.LastReload.Revision == good {
			t.Errorf("reload error = %+v, want the compiler's message and the broken revision", status.LastReload)
		}
		if !createAllowed(t, e) {
			t.Error("decisions no longer follow the last good policy")
		}
		if got := enginetest.Reloads(t, reg, "error"); got != 1 {
			t.Errorf("failed reloads = %v, want 1", got)
		}
		if !logs.contains(`"msg"="policy reload failed"`) || !logs.contains(`"effect"="the last good policies stay in force"`) || !logs.contains("broken.rego:4") {
			t.Errorf("the failure is not logged with the compiler's message: %q", logs.lines)
		}
	})

	t.Run("undoing the break clears the error", func(t *testing.T) {
		if err := os.Remove(filepath.Join(dir, "broken.rego")); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the reload succeeds", func() bool { return e.PolicyStatus().LastReload.Result == "success" })
		if got := enginetest.Reloads(t, reg, "success"); got != 2 {
			t.Errorf("successful reloads = %v, want 2", got)
		}
	})

	t.Run("the fence state survives a reload", func(t *testing.T) {
		if fence, ok := e.Fence("default"); !ok || fence != westFenced {
			t.Errorf("Fence after reloads = %+v, %v", fence, ok)
		}
	})
}

// TestConfigMapUpdate updates a policy directory the way the kubelet
// updates a ConfigMap volume: the files are symbolic links through ..data,
// which is swapped atomically to a new directory.
func TestConfigMapUpdate(t *testing.T) {
	src := enginetest.CopyPolicies(t)
	dir := t.TempDir()
	version := func(name string, edit func(file, content string) string) {
		t.Helper()
		target := filepath.Join(dir, name)
		if err := os.Mkdir(target, 0o700); err != nil {
			t.Fatal(err)
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, entry := range entries {
			content, err := os.ReadFile(filepath.Join(src, entry.Name()))
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(target, entry.Name()), edit(entry.Name(), string(content)))
		}
	}
	unchanged := func(_, content string) string { return content }
	version("..2026_03_01_v1", unchanged)
	if err := os.Symlink("..2026_03_01_v1", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(src)
	for _, entry := range entries {
		if err := os.Symlink(filepath.Join("..data", entry.Name()), filepath.Join(dir, entry.Name())); err != nil {
			t.Fatal(err)
		}
	}

	e := newEngine(t, engine.Options{PolicyDir: dir, ReloadDelay: 20 * time.Millisecond})
	writeFence(t, e, westFenced)
	startEngine(t, e)
	if createAllowed(t, e) {
		t.Fatal("a fenced cluster admits a create")
	}

	version("..2026_03_01_v2", func(file, content string) string {
		if file == "settings.rego" {
			return strings.Replace(content, `default enforcement := "deny"`, `default enforcement := "dryrun"`, 1)
		}
		return content
	})
	if err := os.Symlink("..2026_03_01_v2", filepath.Join(dir, "..data_tmp")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(dir, "..2026_03_01_v1")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the swapped policies decide", func() bool { return createAllowed(t, e) })
}

func TestConfigReload(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, config, "enforcement: deny\n")
	e := newEngine(t, engine.Options{ConfigFile: config, ReloadDelay: 20 * time.Millisecond})
	writeFence(t, e, westFenced)
	startEngine(t, e)
	if createAllowed(t, e) {
		t.Fatal("enforcement deny admits a create on a fenced cluster")
	}
	writeFile(t, config, "enforcement: warn\n")
	eventually(t, "the new config decides", func() bool { return createAllowed(t, e) })

	writeFile(t, config, "enforcement: nonsense\n")
	eventually(t, "the bad config is refused", func() bool {
		last := e.PolicyStatus().LastReload
		return last != nil && last.Result == "error" && strings.Contains(last.Error, `enforcement: want one of deny, warn or dryrun, got "nonsense"`)
	})
	if !createAllowed(t, e) {
		t.Error("decisions no longer follow the last good config")
	}
}

// TestDecisionsDuringWrites evaluates while the fence state flips and the
// policies reload: every decision must be the one its reported fence state
// calls for, never a mix of two states.
func TestDecisionsDuringWrites(t *testing.T) {
	dir := enginetest.CopyPolicies(t)
	e := newEngine(t, engine.Options{PolicyDir: dir})
	writeFence(t, e, westFenced)
	body := enginetest.Review(t, engine.ReviewRequest{Operation: "CREATE", Object: enginetest.Component("billing", "default", nil)})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				res, err := e.Admit(ctx, body)
				if err != nil {
					errs <- err.Error()
					return
				}
				if res.Decision.Allowed != (res.Fence.Status == fencestate.Active) {
					errs <- "decided allowed=" + fmt.Sprint(res.Decision.Allowed) + " with status " + string(res.Fence.Status)
					return
				}
				if !res.Decision.Allowed && !strings.Contains(res.Decision.Reasons[0], `cluster "`+res.Fence.Cluster.Name+`"`) {
					errs <- "a denial names another cluster than the state it was decided with: " + res.Decision.Reasons[0]
					return
				}
			}
		}()
	}
	for i := range 20 {
		state := westFenced
		if i%2 == 0 {
			state = eastActive
		}
		writeFence(t, e, state)
		if i%5 == 0 {
			writeFile(t, filepath.Join(dir, "extra.rego"), "package fencegate.extra\n\nn := "+string(rune('0'+i%10))+"\n")
			if err := e.Reload(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !strings.Contains(err, "context canceled") {
			t.Error(err)
		}
	}
}
