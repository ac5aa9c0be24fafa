package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/utils/clock"
)

// Start reloads the policies and the config whenever their files change,
// until ctx ends. It watches the directories rather than the files, which
// is what sees a ConfigMap volume's update: the kubelet writes the new files
// into a fresh directory and swaps the ..data symbolic link to it. A burst of
// events is reloaded once, after ReloadDelay of quiet.
func (e *Engine) Start(ctx context.Context) error {
	var dirs []string
	if e.policyDir != "" {
		dirs = append(dirs, e.policyDir)
	}
	for _, f := range e.configFiles {
		if dir := filepath.Dir(f); !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	if len(dirs) == 0 {
		// The embedded policies never change.
		<-ctx.Done()
		return nil
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch policy files: %w", err)
	}
	defer func() { _ = watcher.Close() }() // closing only stops the watch
	for _, dir := range dirs {
		if err := watcher.Add(dir); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
	}
	// Changes made between New and the watch starting are not lost.
	_ = e.Reload(ctx)

	var timer clock.Timer
	var fire <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case event, ok := <-watcher.Events:
			if !ok {
				return nil
			}
			if !e.relevant(event.Name) {
				continue
			}
			if timer != nil {
				timer.Stop()
			}
			timer = e.clock.NewTimer(e.reloadDelay)
			fire = timer.C()
		case err, ok := <-watcher.Errors:
			if !ok {
				return nil
			}
			// The kernel's event queue overflowed or the like: reload to be
			// sure nothing was missed.
			e.log.Error(err, "watching policy files failed", "effect", "reloading")
			timer = e.clock.NewTimer(0)
			fire = timer.C()
		case <-fire:
			fire = nil
			// A failed reload is logged, counted and shown by Reload.
			_ = e.Reload(ctx)
		}
	}
}

// relevant reports whether a change to the named file can change what
// Reload reads: a policy file, a config file, or the kubelet's swap of a
// ConfigMap volume's ..data link. Other files sharing the directories (logs,
// editors' swap files) do not wake a reload.
func (e *Engine) relevant(name string) bool {
	base := filepath.Base(name)
	if strings.HasPrefix(base, "..") {
		return true
	}
	if e.policyDir != "" && filepath.Dir(name) == filepath.Clean(e.policyDir) && strings.HasSuffix(base, ".rego") {
		return true
	}
	return slices.ContainsFunc(e.configFiles, func(f string) bool { return filepath.Clean(f) == filepath.Clean(name) })
}
