package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/test/stack"
)

// TestWalkthrough runs `make run`'s walkthrough in its non-interactive mode.
// Each step checks its own outcome; this test also checks that every step
// ran and reported what it proved.
func TestWalkthrough(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin, err := stack.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := run(ctx, bin, true, &out); err != nil {
		t.Fatalf("walkthrough: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"Step 1 · east declares epoch 1",
		"✓ the authority granted the fence to east",
		"✓ the mutating webhook stamped fencegate.dev/epoch=1",
		`denied the request: fencegate: cluster "west" (epoch 1) does not hold the ownership fence`,
		"✓ a dry run gets exactly the real decision",
		"✓ west took the fence",
		"✓ east stopped admitting before west was granted",
		"✓ only the cluster holding the fence can change Components, and its controller marks them FenceHeld",
		"✓ the operator's view agrees: west holds the fence at epoch 2",
		"Every step behaved as fencegate promises.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("walkthrough output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("walkthrough output:\n%s", out.String())
	}
}
