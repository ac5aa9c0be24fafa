package statemachine

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// step is one request of a scenario, at a time after t0.
type step struct {
	at      time.Duration
	declare *Declaration
	release *Release

	want        Outcome        // for a declaration
	wantRelease ReleaseOutcome // for a release
	wantHolder  string         // the holder's name afterwards
	wantPending string         // the pending cluster's name afterwards, "" for none
	wantEvents  []EventType
}

func declareStep(at time.Duration, c Identity, epoch uint64) step {
	return step{at: at, declare: &Declaration{Cluster: c, Epoch: epoch}}
}

func releaseStep(at time.Duration, c Identity, epoch uint64) step {
	return step{at: at, release: &Release{ClusterUID: c.UID, Epoch: epoch}}
}

// by makes the step's request come from one instance of its cluster.
func (s step) by(instance string) step {
	if s.declare != nil {
		d := *s.declare
		d.Instance = instance
		s.declare = &d
	} else {
		r := *s.release
		r.Instance = instance
		s.release = &r
	}
	return s
}

func (s step) expect(want Outcome, holder, pending string, events ...EventType) step {
	s.want, s.wantHolder, s.wantPending, s.wantEvents = want, holder, pending, events
	return s
}

func (s step) expectRelease(want ReleaseOutcome, holder, pending string, events ...EventType) step {
	s.wantRelease, s.wantHolder, s.wantPending, s.wantEvents = want, holder, pending, events
	return s
}

// TestScenarios runs the release and lease-expiry paths of a takeover
// request by request, the way clusters drive them, with a store that gives
// each grant the next revision as its token.
func TestScenarios(t *testing.T) {
	tests := map[string][]step{
		"planned takeover: fenced holder releases, the pending cluster is granted at once": {
			declareStep(0, east, 7).expect(Granted, "east", "", HolderChanged),
			declareStep(time.Second, west, 7).expect(Fenced, "east", ""),
			declareStep(2*time.Second, west, 8).expect(Acquiring, "east", "west", PendingChanged),
			declareStep(3*time.Second, east, 7).expect(Fenced, "east", "west"),
			releaseStep(3*time.Second, east, 7).expectRelease(Released, "east", "west", HolderReleased),
			declareStep(4*time.Second, east, 7).expect(Fenced, "east", "west"),
			declareStep(4*time.Second, west, 8).expect(Granted, "west", "", HolderChanged, PendingChanged),
			declareStep(5*time.Second, east, 7).expect(Fenced, "west", ""),
			releaseStep(5*time.Second, east, 7).expectRelease(NotHolder, "west", ""),
			declareStep(6*time.Second, west, 8).expect(Renewed, "west", ""),
		},
		"partitioned holder: the takeover waits out the lease, without a release": {
			declareStep(0, east, 7).expect(Granted, "east", "", HolderChanged),
			declareStep(5*time.Second, east, 7).expect(Renewed, "east", ""),
			declareStep(6*time.Second, west, 8).expect(Acquiring, "east", "west", PendingChanged),
			declareStep(19*time.Second, west, 8).expect(Acquiring, "east", "west"),
			declareStep(20*time.Second, west, 8).expect(Granted, "west", "", HolderChanged, PendingChanged),
			declareStep(21*time.Second, east, 7).expect(Fenced, "west", ""),
		},
		"the fence comes back to an earlier holder with a higher epoch": {
			declareStep(0, east, 1).expect(Granted, "east", "", HolderChanged),
			releaseStep(time.Second, east, 1).expectRelease(Released, "east", "", HolderReleased),
			declareStep(time.Second, west, 2).expect(Granted, "west", "", HolderChanged),
			releaseStep(2*time.Second, west, 2).expectRelease(Released, "west", "", HolderReleased),
			declareStep(2*time.Second, east, 3).expect(Granted, "east", "", HolderChanged),
		},
		"two pods of the holder: the takeover waits until both released": {
			declareStep(0, east, 7).by("east-a").expect(Granted, "east", "", HolderChanged),
			declareStep(time.Second, east, 7).by("east-b").expect(Renewed, "east", ""),
			declareStep(2*time.Second, west, 8).expect(Acquiring, "east", "west", PendingChanged),
			declareStep(3*time.Second, east, 7).by("east-a").expect(Fenced, "east", "west"),
			releaseStep(3*time.Second, east, 7).by("east-a").expectRelease(Released, "east", "west"),
			declareStep(4*time.Second, west, 8).expect(Acquiring, "east", "west"),
			declareStep(5*time.Second, east, 7).by("east-b").expect(Fenced, "east", "west"),
			releaseStep(5*time.Second, east, 7).by("east-b").expectRelease(Released, "east", "west", HolderReleased),
			declareStep(5*time.Second, west, 8).expect(Granted, "west", "", HolderChanged, PendingChanged),
		},
		"two pods of the holder, one partitioned: the takeover waits out its lease": {
			declareStep(0, east, 7).by("east-a").expect(Granted, "east", "", HolderChanged),
			declareStep(2*time.Second, east, 7).by("east-b").expect(Renewed, "east", ""),
			declareStep(3*time.Second, west, 8).expect(Acquiring, "east", "west", PendingChanged),
			declareStep(4*time.Second, east, 7).by("east-a").expect(Fenced, "east", "west"),
			releaseStep(4*time.Second, east, 7).by("east-a").expectRelease(Released, "east", "west"),
			declareStep(16*time.Second, west, 8).expect(Acquiring, "east", "west"),
			declareStep(17*time.Second, west, 8).expect(Granted, "west", "", HolderChanged, PendingChanged),
		},
		"a new pod of the holder while a takeover is pending does not keep the fence": {
			declareStep(0, east, 7).by("east-a").expect(Granted, "east", "", HolderChanged),
			declareStep(time.Second, west, 8).expect(Acquiring, "east", "west", PendingChanged),
			declareStep(2*time.Second, east, 7).by("east-b").expect(Fenced, "east", "west"),
			releaseStep(2*time.Second, east, 7).by("east-b").expectRelease(NoLease, "east", "west"),
			declareStep(3*time.Second, east, 7).by("east-a").expect(Fenced, "east", "west"),
			releaseStep(3*time.Second, east, 7).by("east-a").expectRelease(Released, "east", "west", HolderReleased),
			declareStep(3*time.Second, west, 8).expect(Granted, "west", "", HolderChanged, PendingChanged),
		},
		"a rollout: the old pod releases at its own epoch when it stops": {
			declareStep(0, east, 7).by("east-old").expect(Granted, "east", "", HolderChanged),
			declareStep(time.Second, east, 8).by("east-new").expect(Renewed, "east", ""),
			declareStep(2*time.Second, east, 7).by("east-old").expect(Regressed, "east", ""),
			releaseStep(2*time.Second, east, 7).by("east-old").expectRelease(Released, "east", ""),
			declareStep(3*time.Second, west, 9).expect(Acquiring, "east", "west", PendingChanged),
			declareStep(3*time.Second, east, 8).by("east-new").expect(Fenced, "east", "west"),
			releaseStep(3*time.Second, east, 8).by("east-new").expectRelease(Released, "east", "west", HolderReleased),
			declareStep(3*time.Second, west, 9).expect(Granted, "west", "", HolderChanged, PendingChanged),
		},
		"a restored cluster with its old uid is refused": {
			declareStep(0, east, 7).expect(Granted, "east", "", HolderChanged),
			declareStep(time.Minute, west, 8).expect(Granted, "west", "", HolderChanged),
			declareStep(time.Minute+time.Second, east, 5).expect(Regressed, "west", ""),
			releaseStep(time.Minute+time.Second, west, 7).expectRelease(ReleaseRegressed, "west", ""),
			// Once west's lease ended, it has nothing left to release.
			releaseStep(2*time.Minute, west, 7).expectRelease(NoLease, "west", ""),
		},
	}
	machine := Machine{LeaseTTL: ttl}
	for name, steps := range tests {
		t.Run(name, func(t *testing.T) {
			var state State
			var revision, lastToken uint64
			for i, s := range steps {
				var events []EventType
				if s.declare != nil {
					got, err := machine.Declare(state, presenting(state, *s.declare), t0.Add(s.at))
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if got.Answer.Outcome != s.want {
						t.Errorf("step %d: %s declaring %d: %s, want %s", i, s.declare.Cluster.Name, s.declare.Epoch, got.Answer.Outcome, s.want)
					}
					state, events = got.State, got.Events
				} else {
					got, err := machine.Release(state, *s.release, t0.Add(s.at))
					if err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					if got.Outcome != s.wantRelease {
						t.Errorf("step %d: release by %s: %s, want %s", i, s.release.ClusterUID, got.Outcome, s.wantRelease)
					}
					state, events = got.State, got.Events
				}
				revision++
				if h := state.Holder; h != nil && h.Token == 0 {
					if revision <= lastToken {
						t.Fatalf("step %d: token %d does not grow past %d", i, revision, lastToken)
					}
					h.Token, lastToken = revision, revision
				}
				if name := state.Holder.Name; name != s.wantHolder {
					t.Errorf("step %d: holder %s, want %s", i, name, s.wantHolder)
				}
				var pending string
				if state.Pending != nil {
					pending = state.Pending.Name
				}
				if pending != s.wantPending {
					t.Errorf("step %d: pending %q, want %q", i, pending, s.wantPending)
				}
				if diff := cmp.Diff(s.wantEvents, events); diff != "" {
					t.Errorf("step %d: events (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestChanges(t *testing.T) {
	withToken := func(h *Holder, token uint64) *Holder { h.Token = token; return h }
	tests := map[string]struct {
		old, next State
		want      []EventType
	}{
		"nothing":                  {},
		"first holder":             {next: State{Holder: holding(east, 1, 0)}, want: []EventType{HolderChanged}},
		"renewal":                  {old: State{Holder: holding(east, 1, 0)}, next: State{Holder: holding(east, 1, 5*time.Second)}},
		"holder raises its epoch":  {old: State{Holder: holding(east, 1, 0)}, next: State{Holder: holding(east, 2, 0)}},
		"new holder":               {old: State{Holder: holding(east, 1, 0)}, next: State{Holder: withToken(holding(west, 2, 0), 11)}, want: []EventType{HolderChanged}},
		"same holder, new grant":   {old: State{Holder: holding(east, 1, 0)}, next: State{Holder: withToken(holding(east, 2, 0), 12)}, want: []EventType{HolderChanged}},
		"uncommitted grant":        {old: State{Holder: holding(east, 1, 0)}, next: State{Holder: withToken(holding(east, 2, 0), 0)}, want: []EventType{HolderChanged}},
		"release":                  {old: State{Holder: holding(east, 1, 0)}, next: State{Holder: released(holding(east, 1, 0))}, want: []EventType{HolderReleased}},
		"release cleared":          {old: State{Holder: released(holding(east, 1, 0))}, next: State{Holder: holding(east, 1, 0)}},
		"pending appears":          {next: State{Pending: pendingAt(west, 2, 0)}, want: []EventType{PendingChanged}},
		"pending raises its epoch": {old: State{Pending: pendingAt(west, 2, 0)}, next: State{Pending: pendingAt(west, 3, 0)}, want: []EventType{PendingChanged}},
		"pending asks again":       {old: State{Pending: pendingAt(west, 2, 0)}, next: State{Pending: pendingAt(west, 2, 0)}},
		"pending replaced":         {old: State{Pending: pendingAt(west, 2, 0)}, next: State{Pending: pendingAt(north, 2, 0)}, want: []EventType{PendingChanged}},
		"takeover": {
			old:  State{Holder: released(holding(east, 1, 0)), Pending: pendingAt(west, 2, 0)},
			next: State{Holder: withToken(holding(west, 2, 0), 20)},
			want: []EventType{HolderChanged, PendingChanged},
		},
		"cluster records only": {next: State{Clusters: seen(map[Identity]uint64{east: 1})}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, Changes(tc.old, tc.next)); diff != "" {
				t.Errorf("Changes (-want +got):\n%s", diff)
			}
		})
	}
}
