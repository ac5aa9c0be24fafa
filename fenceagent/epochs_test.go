package fenceagent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/fencestate"
)

// The epochs of the step refusal tests: the agent declares testSelf's epoch
// 7, the authority has seen 8 at most and allows steps of 1000, and an
// operator's typo asks for 70000.
const (
	typoEpoch    = 70000
	typoHighest  = 8
	typoStep     = 1000
	typoMaxEpoch = typoHighest + typoStep
)

// TestAnswerNamesTheEpochItWasSentAt: an answer that arrives after SetEpoch
// answers the epoch its declaration was sent at, and its state names that
// epoch; the answer to the new epoch then names the new one.
func TestAnswerNamesTheEpochItWasSentAt(t *testing.T) {
	const raised = 8
	tests := map[string]struct {
		// raised answers the declaration of the raised epoch.
		raised      func(*declareCall)
		wantRaised  fencestate.Status
		wantMessage string
	}{
		"a late grant, then a grant of the raised epoch": {
			raised:     func(c *declareCall) { c.grant(testLease, 4) },
			wantRaised: fencestate.Active,
		},
		"a late grant, then a takeover pending at the raised epoch": {
			raised:      func(c *declareCall) { c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testSelf, raised, 0)) },
			wantRaised:  fencestate.Fenced,
			wantMessage: "east (epoch 8)",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			ta.startManual(t)

			lateDone := make(chan outcome, 1)
			go func() { lateDone <- ta.declare(ctx) }()
			late := auth.next(t)
			if err := ta.SetEpoch(ctx, raised); err != nil {
				t.Fatal(err)
			}
			next := auth.next(t)
			if got := next.req.GetEpoch(); got != raised {
				t.Fatalf("the declaration after SetEpoch(%d) has epoch %d", raised, got)
			}
			late.grant(testLease, 3)
			if o := <-lateDone; !o.applied {
				t.Fatalf("the late grant was not applied: %+v", o)
			}
			s, _ := ta.store.last(testSelf.Name)
			if s.Status != fencestate.Active || s.Token != 3 || s.Cluster.Epoch != testSelf.Epoch {
				t.Errorf("the answer to epoch %d wrote %s (token %d) at epoch %d, want active at %d",
					testSelf.Epoch, s.Status, s.Token, s.Cluster.Epoch, testSelf.Epoch)
			}

			tc.raised(next)
			eventually(t, "the answer to the raised epoch is applied", func() bool { return ta.Status().Cluster.Epoch == raised })
			if s := ta.Status(); s.Status != tc.wantRaised || !strings.Contains(s.Message, tc.wantMessage) {
				t.Errorf("after the answer to epoch %d: %s, message %q; want %s, message with %q", raised, s.Status, s.Message, tc.wantRaised, tc.wantMessage)
			}
		})
	}
}

// TestEpochStepRefusalKeepsTheAcceptedEpoch: when the authority refuses a
// raised epoch for its step, the agent goes on declaring the epoch it had
// accepted, keeps that epoch's status, says why in EpochRefused, and does
// not ask for the refused epoch again on its own.
func TestEpochStepRefusalKeepsTheAcceptedEpoch(t *testing.T) {
	grant := func(c *declareCall) { c.grant(testLease, 1) }
	fenced := func(c *declareCall) {
		c.answer(nil, refusalErr(rpctypes.ReasonClusterFenced, testWest, testSelf.Epoch, 0))
	}
	tests := map[string]struct {
		// accept answers the declarations of epoch 7.
		accept      func(*declareCall)
		want        fencestate.Status
		wantReason  string
		refusal     error
		wantMessage []string
		// notInMessage must not be in the refusal's message.
		notInMessage string
	}{
		"the holder keeps holding": {
			accept: grant, want: fencestate.Active,
			refusal:     stepRefusal(typoEpoch, typoHighest, typoStep),
			wantMessage: []string{"epoch 70000", "epoch 7", "1000 above 8", "spec.epoch", "at most 1008", "or to 7"},
		},
		"a standby stays fenced": {
			accept: fenced, want: fencestate.Fenced, wantReason: rpctypes.ReasonClusterFenced,
			refusal:     stepRefusal(typoEpoch, typoHighest, typoStep),
			wantMessage: []string{"epoch 70000", "at most 1008", "or to 7"},
		},
		"a refusal that names no limits": {
			accept: grant, want: fencestate.Active,
			refusal:      stepRefusal(typoEpoch, 0, 0),
			wantMessage:  []string{"epoch 70000", "spec.epoch", "back to 7"},
			notInMessage: "at most",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			ta.start(t)
			tc.accept(auth.next(t))
			ta.waitStatus(t, tc.want)
			drain(ta.signals)

			if err := ta.SetEpoch(context.Background(), typoEpoch); err != nil {
				t.Fatal(err)
			}
			typo := auth.next(t)
			if got := typo.req.GetEpoch(); got != typoEpoch {
				t.Fatalf("the declaration after SetEpoch(%d) has epoch %d", typoEpoch, got)
			}
			typo.answer(nil, tc.refusal)
			eventually(t, "the refusal is in the state", func() bool { return ta.Status().EpochRefused != nil })
			check := func(when string) {
				t.Helper()
				s := ta.Status()
				if s.Status != tc.want || s.Reason != tc.wantReason || s.Cluster.Epoch != testSelf.Epoch {
					t.Errorf("%s: %s (%s) at epoch %d, want %s (%s) at the accepted epoch %d", when, s.Status, s.Reason, s.Cluster.Epoch, tc.want, tc.wantReason, testSelf.Epoch)
				}
				r := s.EpochRefused
				if r == nil {
					t.Fatalf("%s: no EpochRefused", when)
				}
				if r.Epoch != typoEpoch || r.Reason != rpctypes.ReasonEpochStepTooLarge {
					t.Errorf("%s: EpochRefused = %+v, want epoch %d, reason %s", when, r, typoEpoch, rpctypes.ReasonEpochStepTooLarge)
				}
				for _, part := range tc.wantMessage {
					if !strings.Contains(r.Message, part) {
						t.Errorf("%s: refusal message %q does not contain %q", when, r.Message, part)
					}
				}
				if tc.notInMessage != "" && strings.Contains(r.Message, tc.notInMessage) {
					t.Errorf("%s: refusal message %q contains %q", when, r.Message, tc.notInMessage)
				}
			}
			check("after the refusal")
			if !signalledNow(ta.signals) {
				t.Error("the refusal of the raised epoch was not signalled")
			}

			// The heartbeats renew the accepted epoch; the refused one is
			// not asked for again.
			for i := range 2 {
				ta.stepUntil(t, 100*time.Millisecond, testInterval, "a heartbeat", func() bool { return len(auth.declares) > 0 })
				hb := auth.next(t)
				if got := hb.req.GetEpoch(); got != testSelf.Epoch {
					t.Fatalf("heartbeat %d after the refusal declares epoch %d, want the accepted %d", i, got, testSelf.Epoch)
				}
				written := ta.store.count()
				tc.accept(hb)
				eventually(t, "the heartbeat's answer is written", func() bool { return ta.store.count() > written })
			}
			check("after the heartbeats")
			if signalledNow(ta.signals) {
				t.Error("renewals of the accepted epoch were signalled")
			}
		})
	}
}

// TestFirstDeclarationRefusedForItsStep: with no accepted epoch to go back
// to, the agent is unknown with the authority's reason. Nothing was
// recorded at that epoch, so SetEpoch may then lower it, without a restart:
// a typo in spec.epoch that a pod started with is undone by lowering it.
func TestFirstDeclarationRefusedForItsStep(t *testing.T) {
	tests := map[string]struct {
		epoch uint64
		// declared is the epoch SetEpoch declares at once; 0: none.
		declared uint64
	}{
		"a lower epoch is declared at once":  {epoch: 5, declared: 5},
		"down to the first epoch":            {epoch: 1, declared: 1},
		"a higher one too":                   {epoch: 9, declared: 9},
		"the refused one is not asked again": {epoch: testSelf.Epoch},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			ta.start(t)
			auth.next(t).answer(nil, stepRefusal(testSelf.Epoch, 1, 5))
			s := waitReason(t, ta.ClusterFence, rpctypes.ReasonEpochStepTooLarge)
			if s.Status != fencestate.Unknown || s.EpochRefused != nil || s.ValidUntilNS != 0 || s.Cluster.Epoch != testSelf.Epoch {
				t.Errorf("state = %+v, want unknown at epoch %d without EpochRefused", s, testSelf.Epoch)
			}

			if err := ta.SetEpoch(context.Background(), tc.epoch); err != nil {
				t.Fatalf("SetEpoch(%d) after the first epoch was refused for its step: %v", tc.epoch, err)
			}
			if tc.declared == 0 {
				auth.noDeclaration(t)
				return
			}
			c := auth.next(t)
			if got := c.req.GetEpoch(); got != tc.declared {
				t.Fatalf("the declaration after SetEpoch(%d) has epoch %d, want %d", tc.epoch, got, tc.declared)
			}
			c.grant(testLease, 1)
			if s := ta.waitStatus(t, fencestate.Active); s.Cluster.Epoch != tc.declared {
				t.Errorf("active at epoch %d, want %d", s.Cluster.Epoch, tc.declared)
			}
			// Accepted now: an epoch only rises again.
			if below := tc.declared - 1; below > 0 {
				if err := ta.SetEpoch(context.Background(), below); err == nil || !strings.Contains(err.Error(), "an epoch only rises") {
					t.Errorf("SetEpoch(%d) below the accepted %d = %v, want a refusal", below, tc.declared, err)
				}
			}
		})
	}
}

// TestEpochsRequest: which epochs SetEpoch takes, and what the agent then
// declares. An epoch may be lowered only below one the authority refused for
// its step, which it never recorded, and never below one it accepted.
func TestEpochsRequest(t *testing.T) {
	refusal := &fencestate.EpochRefusal{Epoch: typoEpoch, Reason: rpctypes.ReasonEpochStepTooLarge}
	tests := map[string]struct {
		epochs epochs
		epoch  uint64
		// declare is whether the epoch is declared at once, declared the
		// epoch declared then; wantErr a part of the error.
		declare  bool
		declared uint64
		wantErr  string
	}{
		"a raise": {
			epochs: epochs{requested: 7, accepted: 7}, epoch: 9, declare: true, declared: 9,
		},
		"the same epoch": {
			epochs: epochs{requested: 7, accepted: 7}, epoch: 7, declared: 7,
		},
		"below the accepted epoch": {
			epochs: epochs{requested: 7, accepted: 7}, epoch: 6, declared: 7, wantErr: "an epoch only rises",
		},
		"below a raise not answered yet, which may be recorded": {
			epochs: epochs{requested: 9, accepted: 7}, epoch: 8, declared: 9, wantErr: "below epoch 9",
		},
		"back to the accepted epoch after a refused raise": {
			epochs: epochs{requested: typoEpoch, accepted: 7, refused: refusal}, epoch: 7, declare: true, declared: 7,
		},
		"between the accepted epoch and a refused raise": {
			epochs: epochs{requested: typoEpoch, accepted: 7, refused: refusal}, epoch: 9, declare: true, declared: 9,
		},
		"below the accepted epoch after a refused raise": {
			epochs: epochs{requested: typoEpoch, accepted: 7, refused: refusal}, epoch: 6, declared: 7, wantErr: "below epoch 7",
		},
		"a refused raise asked for again": {
			epochs: epochs{requested: typoEpoch, accepted: 7, refused: refusal}, epoch: typoEpoch, declare: true, declared: typoEpoch,
		},
		"below a first epoch refused for its step": {
			epochs: epochs{requested: typoEpoch, stepRefused: true}, epoch: 3, declare: true, declared: 3,
		},
		"above a first epoch refused for its step": {
			epochs: epochs{requested: typoEpoch, stepRefused: true}, epoch: typoEpoch + 1, declare: true, declared: typoEpoch + 1,
		},
		"a first epoch refused for its step, again": {
			epochs: epochs{requested: typoEpoch, stepRefused: true}, epoch: typoEpoch, declared: typoEpoch,
		},
		"below a first epoch not answered yet": {
			epochs: epochs{requested: typoEpoch}, epoch: 3, declared: typoEpoch, wantErr: "below epoch 70000",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := tc.epochs
			declare, err := e.request(tc.epoch)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("request(%d) = %v, want error %q", tc.epoch, err, tc.wantErr)
			}
			if declare != tc.declare || e.declared() != tc.declared {
				t.Errorf("request(%d): declare %t, then declares %d; want %t, %d", tc.epoch, declare, e.declared(), tc.declare, tc.declared)
			}
		})
	}
}

// TestEpochsRefuseStep: a step refusal of the epoch asked for sends the
// agent back to the accepted epoch when it has one; otherwise the agent goes
// on declaring the refused epoch, and may lower it, until an epoch is
// accepted or asked for. A refusal of an epoch no longer asked for changes
// nothing.
func TestEpochsRefuseStep(t *testing.T) {
	refusal := &fencestate.EpochRefusal{Epoch: typoEpoch, Reason: rpctypes.ReasonEpochStepTooLarge}
	tests := map[string]struct {
		epochs  epochs
		refused uint64
		// revert is refuseStep's answer; declared and lowest the epoch
		// declared and the lowest that may be asked for then.
		revert           bool
		declared, lowest uint64
	}{
		"a raise above an accepted epoch": {
			epochs: epochs{requested: typoEpoch, accepted: 7}, refused: typoEpoch, revert: true, declared: 7, lowest: 7,
		},
		"the first epoch": {
			epochs: epochs{requested: typoEpoch}, refused: typoEpoch, declared: typoEpoch, lowest: 0,
		},
		"an epoch no longer asked for": {
			epochs: epochs{requested: 3}, refused: typoEpoch, declared: 3, lowest: 3,
		},
		"an epoch no longer asked for, after an accepted one": {
			epochs: epochs{requested: 9, accepted: 7}, refused: typoEpoch, declared: 9, lowest: 9,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			e := tc.epochs
			if got := e.refuseStep(tc.refused, refusal); got != tc.revert {
				t.Errorf("refuseStep(%d) = %t, want %t", tc.refused, got, tc.revert)
			}
			if e.declared() != tc.declared || e.lowest() != tc.lowest {
				t.Errorf("after refuseStep(%d): declares %d, lowest %d; want %d, %d", tc.refused, e.declared(), e.lowest(), tc.declared, tc.lowest)
			}
			// Once the epoch asked for is accepted, it is the floor again.
			e.accept(e.requested)
			if e.declared() != e.requested || e.lowest() != e.requested {
				t.Errorf("after accept(%d): declares %d, lowest %d; want %d for both", e.requested, e.declared(), e.lowest(), e.requested)
			}
		})
	}
}

// TestEpochStepRefusalUndone: once the authority refused a raised epoch for
// its step, the next SetEpoch decides: an epoch it accepts, or the accepted
// one, clears the refusal; the refused one is asked for once more; one below
// the accepted epoch is refused by the agent.
func TestEpochStepRefusalUndone(t *testing.T) {
	tests := map[string]struct {
		epoch uint64
		// answer answers the declaration SetEpoch makes; nil: none is
		// expected.
		answer      func(*declareCall)
		wantErr     string
		wantEpoch   uint64
		wantRefused uint64
	}{
		"an epoch the authority accepts": {
			epoch: 9, answer: func(c *declareCall) { c.grant(testLease, 2) }, wantEpoch: 9,
		},
		"back to the accepted epoch": {
			epoch: testSelf.Epoch, answer: func(c *declareCall) { c.grant(testLease, 1) }, wantEpoch: testSelf.Epoch,
		},
		"the refused epoch again": {
			epoch: typoEpoch, answer: func(c *declareCall) { c.answer(nil, stepRefusal(typoEpoch, typoHighest, typoStep)) },
			wantEpoch: testSelf.Epoch, wantRefused: typoEpoch,
		},
		"another epoch refused for its step": {
			epoch: 5000, answer: func(c *declareCall) { c.answer(nil, stepRefusal(5000, typoHighest, typoStep)) },
			wantEpoch: testSelf.Epoch, wantRefused: 5000,
		},
		"below the accepted epoch": {
			epoch: testSelf.Epoch - 1, wantErr: "an epoch only rises", wantEpoch: testSelf.Epoch, wantRefused: typoEpoch,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			auth, client := newScriptedAuthority(t)
			ta := newTestAgent(t, client, nil)
			ta.startManual(t)
			declare := func(answer func(*declareCall)) *declareCall {
				done := make(chan outcome, 1)
				go func() { done <- ta.declare(ctx) }()
				c := auth.next(t)
				answer(c)
				<-done
				return c
			}
			declare(func(c *declareCall) { c.grant(testLease, 1) })
			if err := ta.SetEpoch(ctx, typoEpoch); err != nil {
				t.Fatal(err)
			}
			auth.next(t).answer(nil, stepRefusal(typoEpoch, typoHighest, typoStep))
			eventually(t, "the refusal is in the state", func() bool { return ta.Status().EpochRefused != nil })

			answers := ta.answers()
			err := ta.SetEpoch(ctx, tc.epoch)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("SetEpoch(%d) = %v, want error %q", tc.epoch, err, tc.wantErr)
			}
			if tc.answer == nil {
				auth.noDeclaration(t)
			} else {
				c := auth.next(t)
				if got := c.req.GetEpoch(); got != tc.epoch {
					t.Fatalf("SetEpoch(%d) declared epoch %d", tc.epoch, got)
				}
				tc.answer(c)
				eventually(t, "the answer is taken in", func() bool { return ta.answers() > answers })
			}
			refusedEpoch := func() uint64 {
				if r := ta.Status().EpochRefused; r != nil {
					return r.Epoch
				}
				return 0
			}
			eventually(t, "the state follows", func() bool {
				return ta.Status().Cluster.Epoch == tc.wantEpoch && refusedEpoch() == tc.wantRefused
			})
			// The renewal declares the epoch the state names.
			c := declare(func(c *declareCall) { c.grant(testLease, 2) })
			if got := c.req.GetEpoch(); got != tc.wantEpoch {
				t.Errorf("the next declaration has epoch %d, want %d", got, tc.wantEpoch)
			}
			if s := ta.Status(); s.Status != fencestate.Active || refusedEpoch() != tc.wantRefused {
				t.Errorf("after the renewal: %s, refused epoch %d; want active, %d", s.Status, refusedEpoch(), tc.wantRefused)
			}
		})
	}
}

// answers counts the declarations that ended, whatever their result.
func (ta *testAgent) answers() float64 {
	labels := map[string]bool{}
	n := 0.0
	for _, k := range answerKinds {
		if l := k.result(); !labels[l] {
			labels[l] = true
			n += ta.declarations(k)
		}
	}
	return n
}

// drain empties a signal channel.
func drain(ch <-chan struct{}) {
	for signalledNow(ch) {
	}
}

// signalledNow reports whether ch holds a signal, taking it.
func signalledNow(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
