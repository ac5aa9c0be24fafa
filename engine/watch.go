package engine

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/fencegate/fencegate/internal/filewatch"
)

// Start reloads the policies and the config whenever their files change,
// until ctx ends, through package filewatch: it sees a ConfigMap volume's
// update too, and reloads a burst of events once, after ReloadDelay of
// quiet.
func (e *Engine) Start(ctx context.Context) error {
	var dirs []string
	if e.policyDir != "" {
		dirs = append(dirs, e.policyDir)
	}
	for _, f := range e.configFiles {
		dirs = append(dirs, filepath.Dir(f))
	}
	if len(dirs) == 0 {
		// The embedded policies never change.
		<-ctx.Done()
		return nil
	}
	opts := e.watchOptions(ctx)
	opts.Dirs = dirs
	if err := filewatch.Run(ctx, opts); err != nil {
		return fmt.Errorf("watch policy files: %w", err)
	}
	return nil
}

// watchOptions are how Start watches, but for the directories.
func (e *Engine) watchOptions(ctx context.Context) filewatch.Options {
	return filewatch.Options{
		Relevant: e.relevant,
		Delay:    e.reloadDelay,
		Clock:    e.clock,
		// Changes made between New and the watch starting are not lost.
		// A failed reload is logged, counted and shown by Reload.
		OnChange: func() { _ = e.Reload(ctx) },
		OnError: func(err error) {
			// The kernel's event queue overflowed or the like: reloading
			// makes sure nothing was missed.
			e.log.Error(err, "policy file watch failed; reloading")
		},
	}
}

// relevant reports whether a change to the named file can change what
// Reload reads: a policy file or a config file (filewatch adds the
// kubelet's swap of a ConfigMap volume's ..data link). Other files sharing
// the directories (logs, editors' swap files) do not wake a reload.
func (e *Engine) relevant(name string) bool {
	if e.policyDir != "" && filepath.Dir(name) == filepath.Clean(e.policyDir) && strings.HasSuffix(filepath.Base(name), ".rego") {
		return true
	}
	return slices.ContainsFunc(e.configFiles, func(f string) bool { return filepath.Clean(f) == filepath.Clean(name) })
}
