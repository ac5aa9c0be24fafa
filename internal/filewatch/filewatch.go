// Package filewatch calls a function when files it cares about change. It
// watches directories rather than files, which is what sees a ConfigMap
// volume's update: the kubelet writes the new files into a fresh directory
// and swaps the ..data symbolic link to it, so the file's own inode never
// changes. A burst of events is handled once, after a quiet delay.
package filewatch

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

// Options configure Run.
type Options struct {
	// Dirs are the directories to watch.
	Dirs []string
	// Relevant reports whether a change to the named file matters; nil
	// means every change does. The kubelet's swap of a ConfigMap volume
	// (a name starting with "..") always matters.
	Relevant func(name string) bool
	// Delay is the quiet time after the last relevant event before
	// OnChange runs.
	Delay time.Duration
	// Clock times the delay; nil means the real clock.
	Clock clock.Clock
	// OnChange is called after a burst of relevant changes, and once at
	// start, so that a change made before the watch began is not lost.
	OnChange func()
	// OnError is told when the watch itself fails (the kernel's event
	// queue overflowed, say); OnChange then runs anyway, to be sure
	// nothing was missed. Nil ignores it.
	OnError func(error)
}

// Wakes reports whether a change to the named file calls OnChange: the
// kubelet's swap of a ConfigMap volume always does, other files when
// Relevant says so.
func (o Options) Wakes(name string) bool {
	return strings.HasPrefix(filepath.Base(name), "..") || o.Relevant == nil || o.Relevant(name)
}

// Run watches until ctx ends, calling opts.OnChange as described. It
// returns an error only when the watch cannot be set up.
func Run(ctx context.Context, opts Options) error {
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	watcher, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch files: %w", err)
	}
	defer func() { _ = watcher.Close() }() // closing only stops the watch
	var dirs []string
	for _, dir := range opts.Dirs {
		if dir = filepath.Clean(dir); slices.Contains(dirs, dir) {
			continue
		}
		dirs = append(dirs, dir)
		if err := watcher.Add(dir); err != nil {
			return fmt.Errorf("watch %s: %w", dir, err)
		}
	}
	opts.OnChange()

	var timer clock.Timer
	var fire <-chan time.Time
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	arm := func(d time.Duration) {
		if timer != nil {
			timer.Stop()
		}
		timer = opts.Clock.NewTimer(d)
		fire = timer.C()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case event, ok := <-watcher.Events:
			if !ok {
				return nil
			}
			if opts.Wakes(event.Name) {
				arm(opts.Delay)
			}
		case err, ok := <-watcher.Errors:
			if !ok {
				return nil
			}
			if opts.OnError != nil {
				opts.OnError(err)
			}
			arm(0)
		case <-fire:
			fire = nil
			opts.OnChange()
		}
	}
}
