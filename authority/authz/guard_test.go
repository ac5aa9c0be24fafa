package authz

import (
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"
)

// TestShouldLog: a refusal of one identity and method is logged at most
// once a minute, and the limiter remembers at most maxLogKeys of them, so
// that a flood of identities can neither grow its memory nor the log past
// that bound in a minute.
func TestShouldLog(t *testing.T) {
	type call struct {
		// after is how long after the previous call this one comes.
		after            time.Duration
		identity, method string
		want             bool
	}
	tests := map[string]struct {
		// fill makes this many other identities logged just before the
		// calls.
		fill  int
		calls []call
	}{
		"the first refusal is logged": {
			calls: []call{{identity: "a", method: "Declare", want: true}},
		},
		"again within the minute: not logged": {
			calls: []call{
				{identity: "a", method: "Declare", want: true},
				{after: 59 * time.Second, identity: "a", method: "Declare"},
			},
		},
		"again after the minute: logged": {
			calls: []call{
				{identity: "a", method: "Declare", want: true},
				{after: 30 * time.Second, identity: "a", method: "Declare"},
				{after: 30 * time.Second, identity: "a", method: "Declare", want: true},
			},
		},
		"another method or identity has its own minute": {
			calls: []call{
				{identity: "a", method: "Declare", want: true},
				{identity: "a", method: "Release", want: true},
				{identity: "b", method: "Declare", want: true},
			},
		},
		"a full limiter logs no new key within the minute": {
			fill: maxLogKeys,
			calls: []call{
				{identity: "a", method: "Declare"},
				{after: 30 * time.Second, identity: "a", method: "Declare"},
			},
		},
		"a full limiter makes room once its keys are a minute old": {
			fill: maxLogKeys,
			calls: []call{
				{identity: "a", method: "Declare"},
				{after: time.Minute, identity: "a", method: "Declare", want: true},
				{identity: "b", method: "Declare", want: true},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
			g, err := NewGuard(GuardOptions{Logger: logr.Discard(), Clock: clk})
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.fill {
				if !g.shouldLog(fmt.Sprintf("flood-%d", i), "Declare") {
					t.Fatalf("flood-%d, the %d. key, was not logged", i, i+1)
				}
			}
			for i, c := range tc.calls {
				clk.Step(c.after)
				if got := g.shouldLog(c.identity, c.method); got != c.want {
					t.Errorf("call %d (%s %s, +%s): logged %v, want %v", i, c.identity, c.method, c.after, got, c.want)
				}
				if len(g.logged) > maxLogKeys {
					t.Errorf("call %d: the limiter remembers %d keys, more than %d", i, len(g.logged), maxLogKeys)
				}
			}
		})
	}
}
