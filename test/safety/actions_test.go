package safety

import (
	"slices"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// acted is an action of cluster (a UID) under token, in milliseconds.
func acted(cluster string, token uint64, start, end float64) Action {
	ms := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return Action{Actor: cluster + " cronjob", Cluster: cluster, Domain: "d", Token: token, Start: ms(start), End: ms(end)}
}

func TestCheckActions(t *testing.T) {
	grants := []Grant{{Domain: "d", UID: "east", Token: 10}, {Domain: "d", UID: "west", Token: 20}, {Domain: "d", UID: "east", Token: 30, AfterExpiry: true}}
	granted := map[uint64]time.Duration{10: 0, 20: 100 * time.Millisecond, 30: 200 * time.Millisecond}
	copyOf := acted("east#restored-1", 30, 300, 310)
	tests := map[string]struct {
		actions []Action
		want    []string
	}{
		"nothing acted": {},
		"a handover in order": {
			actions: []Action{acted("east", 10, 0, 50), acted("west", 20, 100, 150), acted("east", 30, 250, 260)},
		},
		"the old holder still runs when the new one starts": {
			actions: []Action{acted("east", 10, 0, 120), acted("west", 20, 110, 150)},
			want:    []string{RuleAfterNextGrant, RuleActionsOverlap},
		},
		"one cluster's runs overlap each other": {
			actions: []Action{acted("east", 10, 0, 50), acted("east", 10, 10, 60)},
		},
		"a run after the next grant, before anyone else acted": {
			actions: []Action{acted("east", 10, 0, 101)},
			want:    []string{RuleAfterNextGrant},
		},
		"a run past a grant after an expiry, within the takeover grace": {
			actions: []Action{acted("west", 20, 150, 250)},
		},
		"a run past a grant after an expiry, beyond the takeover grace": {
			actions: []Action{acted("west", 20, 150, 301)},
			want:    []string{RuleAfterNextGrant},
		},
		"a token the authority granted to another cluster": {
			actions: []Action{acted("west", 10, 0, 1)},
			want:    []string{RuleNotGranted},
		},
		"a token the authority never granted": {
			actions: []Action{acted("east", 15, 0, 1)},
			want:    []string{RuleNotGranted},
		},
		"a restored copy counts as another cluster": {
			actions: []Action{acted("east", 30, 300, 320), copyOf},
			want:    []string{RuleActionsOverlap},
		},
		"two domains are two fences": {
			actions: []Action{acted("east", 10, 0, 50), func() Action { a := acted("west", 5, 0, 50); a.Domain = "e"; return a }()},
		},
	}
	grants = append(grants, Grant{Domain: "e", UID: "west", Token: 5})
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := CheckActions(tc.actions, grants, granted, 50*time.Millisecond)
			var got []string
			for _, v := range r.Violations {
				got = append(got, v.Rule)
			}
			slices.Sort(got)
			got = slices.Compact(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("rules broken: %v, want %v; violations: %v", got, tc.want, r.Violations)
			}
		})
	}
}

func TestCheckLinearizable(t *testing.T) {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	lease := func(uid string, epoch, token uint64, start, end int) FenceCall {
		return FenceCall{Kind: CallDeclare, Domain: "d", UID: uid, Epoch: epoch, Start: ms(start), End: ms(end), Answer: AnswerLease, Token: token}
	}
	unknown := func(uid string, epoch uint64, start int) FenceCall {
		return FenceCall{Kind: CallDeclare, Domain: "d", UID: uid, Epoch: epoch, Start: ms(start), End: ms(start + 1), Answer: AnswerUnknown}
	}
	release := func(uid string, answer Answer, start, end int) FenceCall {
		return FenceCall{Kind: CallRelease, Domain: "d", UID: uid, Start: ms(start), End: ms(end), Answer: answer}
	}
	tests := map[string]struct {
		calls []FenceCall
		want  porcupine.CheckResult
	}{
		"a grant, renewals, a release and a takeover": {
			calls: []FenceCall{lease("east", 1, 10, 0, 1), lease("east", 1, 10, 2, 3), release("east", AnswerReleased, 4, 5), lease("west", 2, 20, 6, 7), release("east", AnswerReleaseFenced, 8, 9)},
			want:  porcupine.Ok,
		},
		"concurrent calls ordered either way": {
			calls: []FenceCall{lease("east", 1, 10, 0, 10), lease("west", 2, 20, 1, 9)},
			want:  porcupine.Ok,
		},
		"a token older than one granted before": {
			calls: []FenceCall{lease("west", 2, 20, 0, 1), lease("east", 1, 10, 2, 3)},
			want:  porcupine.Illegal,
		},
		"a takeover at an epoch no higher than the holder's": {
			calls: []FenceCall{lease("east", 2, 10, 0, 1), lease("west", 2, 20, 2, 3)},
			want:  porcupine.Illegal,
		},
		"one token for two clusters": {
			calls: []FenceCall{lease("east", 1, 10, 0, 1), lease("west", 2, 10, 2, 3)},
			want:  porcupine.Illegal,
		},
		"the holder's release refused": {
			calls: []FenceCall{lease("east", 1, 10, 0, 1), release("east", AnswerReleaseFenced, 2, 3)},
			want:  porcupine.Illegal,
		},
		"a grant whose answer was lost, seen in a renewal": {
			calls: []FenceCall{lease("east", 1, 10, 0, 1), unknown("west", 2, 2), lease("west", 2, 20, 50, 51)},
			want:  porcupine.Ok,
		},
		"a call whose answer was lost explains no older token": {
			calls: []FenceCall{lease("west", 2, 20, 0, 1), unknown("east", 1, 2), lease("east", 1, 10, 5, 6)},
			want:  porcupine.Illegal,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := CheckLinearizable(tc.calls, 10*time.Second); got.Result != tc.want {
				t.Errorf("%s, want %s", got.Result, tc.want)
			}
		})
	}
}
