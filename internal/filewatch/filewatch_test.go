package filewatch

import (
	"context"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestRun: the change handler runs once at start, once after a burst of
// relevant writes, and not for a file that does not matter.
func TestRun(t *testing.T) {
	dir := t.TempDir()
	var calls atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Options{
			Dirs:     []string{dir, dir},
			Relevant: func(name string) bool { return filepath.Ext(name) == ".yaml" },
			Delay:    100 * time.Millisecond,
			OnChange: func() { calls.Add(1) },
		})
	}()
	waitCalls := func(want int32) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for calls.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d calls, want %d", calls.Load(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(300 * time.Millisecond) // no more come
		if got := calls.Load(); got != want {
			t.Fatalf("%d calls, want %d", got, want)
		}
	}
	waitCalls(1)
	for i := range 5 {
		if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte{byte(i)}, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	waitCalls(2)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a.yaml", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	waitCalls(3)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if err := Run(context.Background(), Options{Dirs: []string{filepath.Join(dir, "missing")}, OnChange: func() {}}); err == nil {
		t.Error("Run of a missing directory succeeded")
	}
}
