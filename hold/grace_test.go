package hold

import (
	"testing"
	"time"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
)

// TestTakeoverGrace: while this cluster is active and its grant came after
// the previous holder's lease expired, the decision holds until
// ResumeAtNS, and the object is looked at again right then.
func TestTakeoverGrace(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	state := func(status fencestate.Status, resumeAt time.Time) fencestate.State {
		s := fencestate.State{Status: status, Domain: "default"}
		if !resumeAt.IsZero() {
			s.ResumeAtNS = resumeAt.UnixNano()
		}
		return s
	}
	release := engine.HoldDecision{Kind: "cronjob", Fields: suspend}
	tests := map[string]struct {
		state fencestate.State
		grace time.Duration
	}{
		"active, granted after an expiry, in the grace": {state: state(fencestate.Active, now.Add(4*time.Second)), grace: 4 * time.Second},
		"active, a nanosecond of grace left":            {state: state(fencestate.Active, now.Add(time.Nanosecond)), grace: time.Nanosecond},
		"active, the grace ends now":                    {state: state(fencestate.Active, now)},
		"active, the grace ended":                       {state: state(fencestate.Active, now.Add(-time.Second))},
		"active, no grace (a first grant, a release)":   {state: state(fencestate.Active, time.Time{})},
		"fenced: no grace to count, the policy holds":   {state: state(fencestate.Fenced, now.Add(4*time.Second))},
		"unknown: no grace to count, the policy holds":  {state: state(fencestate.Unknown, now.Add(4*time.Second))},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			grace := graceLeft(tc.state, now)
			if grace != tc.grace {
				t.Fatalf("graceLeft = %v, want %v", grace, tc.grace)
			}
			d := duringGrace(release, grace)
			if d.Hold != (tc.grace > 0) {
				t.Errorf("decision during the grace holds = %v, want %v", d.Hold, tc.grace > 0)
			}
			// A held object is not released while the grace lasts, and
			// one not held yet is held.
			heldObj := object(map[string]any{"suspend": true}, map[string]any{RecordAnnotation: `{"fields":[{"path":["spec","suspend"],"value":true,"prior":false}]}`}, owned(FieldManager, "spec", "suspend"))
			if step, err := Plan(heldObj, d); err != nil || (step.Action == Releasing) != (tc.grace == 0) {
				t.Errorf("Plan(held object) = %+v, %v: want a release only once no grace is left", step, err)
			}
			if step, err := Plan(object(map[string]any{"suspend": false}, nil), d); err != nil || (step.Action == Holding) != (tc.grace > 0) {
				t.Errorf("Plan(running object) = %+v, %v: want a hold only during the grace", step, err)
			}
		})
	}
	// A decision that holds anyway is left as it is.
	if d := duringGrace(engine.HoldDecision{Kind: "cronjob", Hold: true, Fields: suspend}, 0); !d.Hold {
		t.Error("duringGrace without grace released a decision that holds")
	}
}

func TestSooner(t *testing.T) {
	tests := map[string]struct{ a, b, want time.Duration }{
		"neither":       {},
		"the first":     {a: time.Second, want: time.Second},
		"the second":    {b: time.Second, want: time.Second},
		"the shorter":   {a: 3 * time.Second, b: time.Second, want: time.Second},
		"the shorter 2": {a: time.Second, b: 3 * time.Second, want: time.Second},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := sooner(tc.a, tc.b); got != tc.want {
				t.Errorf("sooner(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}
