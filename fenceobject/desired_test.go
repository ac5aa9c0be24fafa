package fenceobject_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
	"github.com/fencegate/fencegate/fenceobject"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
)

var (
	t0     = time.Date(2031, 3, 4, 5, 6, 7, 800_000_000, time.UTC)
	east   = fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 1}
	west   = fencestate.Cluster{Name: "west", UID: "uid-west", Epoch: 2}
	active = fencestate.State{Status: fencestate.Active, Domain: "default", Cluster: west, Holder: west, Token: 42, LastSuccessNS: t0.UnixNano()}
	fenced = fencestate.State{Status: fencestate.Fenced, Domain: "default", Cluster: east, Holder: west, Reason: rpctypes.ReasonClusterFenced, LastSuccessNS: t0.UnixNano()}
)

// leader is what a leader derives the status from: its inputs, and the
// entries of status.instances.
type leader struct {
	fenceobject.Inputs
	Instances []fencegatev1alpha1.FenceInstance
}

// inputs are the inputs of a leader that sees s, with every instance
// applying it and every Component marked for it, unless changed.
func inputs(s fencestate.State, live ...string) leader {
	in := leader{Inputs: fenceobject.Inputs{
		State: s, Message: "the policies' words", TargetEpoch: s.Cluster.Epoch, Generation: 3,
		Live: live, Marks: controller.MarkProgress{Started: true, Key: s.Key(), Held: 1, Total: 4}, Now: t0,
	}}
	for _, name := range live {
		in.Instances = append(in.Instances, entry(name, s))
	}
	return in
}

// derive is the status Desired derives from old, holding in's entries.
func derive(old fencegatev1alpha1.ClusterFenceStatus, in leader) fencegatev1alpha1.ClusterFenceStatus {
	old.Instances = in.Instances
	return fenceobject.Desired(old, in.Inputs)
}

// entry is the entry of status.instances of an instance that applies s,
// written out here rather than taken from EntryOf, the function Desired
// compares entries with (TestEntryOf checks that one).
func entry(name string, s fencestate.State) fencegatev1alpha1.FenceInstance {
	e := fencegatev1alpha1.FenceInstance{
		Name: name, State: string(s.Status), Epoch: int64(s.Cluster.Epoch), Token: int64(s.Token),
		ClusterGeneration: int64(s.ClusterGeneration),
	}
	if s.Holder.Name != "" {
		e.Holder = fmt.Sprintf("%s@%d", s.Holder.Name, s.Holder.Epoch)
	}
	return e
}

// TestEntryOf: an instance's entry says the state it applies and the
// generation its agent presents, in literal terms.
func TestEntryOf(t *testing.T) {
	tests := map[string]struct {
		state fencestate.State
		want  fencegatev1alpha1.FenceInstance
	}{
		"active": {
			state: active,
			want:  fencegatev1alpha1.FenceInstance{Name: "west-a", State: "active", Epoch: 2, Holder: "west@2", Token: 42},
		},
		"fenced, with a generation": {
			state: func() fencestate.State { s := fenced; s.ClusterGeneration = 7; return s }(),
			want:  fencegatev1alpha1.FenceInstance{Name: "west-a", State: "fenced", Epoch: 1, Holder: "west@2", ClusterGeneration: 7},
		},
		"no holder known": {
			state: fencestate.State{Status: fencestate.Unknown, Cluster: east},
			want:  fencegatev1alpha1.FenceInstance{Name: "west-a", State: "unknown", Epoch: 1},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := fenceobject.EntryOf("west-a", tc.state); !equality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("EntryOf: %+v, want %+v", got, tc.want)
			}
		})
	}
}

func condition(st fencegatev1alpha1.ClusterFenceStatus, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(st.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{}
}

func TestDesired(t *testing.T) {
	second := metav1.NewTime(t0.Truncate(time.Second))
	// typo is a leader that started at spec.epoch 70000, which the
	// authority refused for its step: it had no epoch accepted to go back to.
	typo := fencestate.State{
		Status: fencestate.Unknown, Domain: "default", Cluster: fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 70000},
		Reason: rpctypes.ReasonEpochStepTooLarge, Message: "the fence authority refused cluster east (epoch 70000)'s declaration", LastSuccessNS: t0.UnixNano(),
	}
	restored := fencestate.State{Status: fencestate.Unknown, Domain: "default", Cluster: east, Reason: rpctypes.ReasonClusterRestored, ClusterGeneration: 4, LastSuccessNS: t0.UnixNano()}
	withGeneration := func(name string, s fencestate.State, g uint64) fencegatev1alpha1.FenceInstance {
		s.ClusterGeneration = g
		return entry(name, s)
	}
	tests := map[string]struct {
		// old is the status before; empty unless set.
		old fencegatev1alpha1.ClusterFenceStatus
		in  leader
		// change alters the inputs.
		change func(*leader)
		// holding and enforced are the conditions' status and reason.
		holding, enforced, reason string
		// messages are parts of Enforced's message.
		messages []string
		// epoch is EpochAccepted's status and reason, and epochMessage a
		// part of its message; unchecked when empty.
		epoch, epochMessage string
		check               func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus)
	}{
		"holding and enforced on two replicas": {
			in:      inputs(active, "west-a", "west-b"),
			holding: "True", enforced: "True", reason: fencegatev1alpha1.ReasonFenceHeld,
			messages: []string{"every fencegate replica (2)"},
			epoch:    "True/EpochAccepted", epochMessage: "accepts epoch 2",
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.State != "active" || st.Epoch != 2 || st.Token != 42 || st.Holder == nil || *st.Holder != (fencegatev1alpha1.FenceCluster{Name: "west", UID: "uid-west", Epoch: 2}) {
					t.Errorf("state %s epoch %d token %d holder %+v", st.State, st.Epoch, st.Token, st.Holder)
				}
				if st.Components == nil || *st.Components != (fencegatev1alpha1.FenceComponents{Held: 1, Total: 4, Summary: "1/4 held"}) {
					t.Errorf("components %+v", st.Components)
				}
				if st.ObservedGeneration != 3 {
					t.Errorf("observedGeneration %d, want 3", st.ObservedGeneration)
				}
				if !st.Since.Equal(&second) || !st.LastDeclaration.Equal(&second) {
					t.Errorf("since %v, lastDeclaration %v, want %v: whole seconds, as the API server keeps them", st.Since, st.LastDeclaration, second)
				}
				if c := condition(st, fencegatev1alpha1.ConditionHolding); c.Message != "the policies' words" || c.ObservedGeneration != 3 {
					t.Errorf("Holding %+v: want the policies' message", c)
				}
			},
		},
		"fenced and enforced: the old holder": {
			in:      inputs(fenced, "east-a"),
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonClusterFenced,
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.FenceReason != rpctypes.ReasonClusterFenced || st.Token != 0 || st.Holder.Name != "west" {
					t.Errorf("fenceReason %q token %d holder %+v", st.FenceReason, st.Token, st.Holder)
				}
			},
		},
		"a replica that applies another state holds Enforced back": {
			in: inputs(active, "west-a", "west-b"),
			change: func(in *leader) {
				in.Instances[1] = entry("west-b", fencestate.State{Status: fencestate.Acquiring, Cluster: west, Holder: east})
			},
			holding: "True", enforced: "False", reason: fencegatev1alpha1.ReasonFenceHeld,
			messages: []string{"1 of 2 fencegate replicas do not apply it yet", "west-b still applies acquiring at epoch 2, holder east@1"},
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.Components != nil {
					t.Errorf("components %+v before the state is enforced: want the last enforced counts (none)", st.Components)
				}
			},
		},
		"a running replica without an entry holds Enforced back": {
			in:      inputs(active, "west-a"),
			change:  func(in *leader) { in.Live = append(in.Live, "west-new") },
			holding: "True", enforced: "False", reason: fencegatev1alpha1.ReasonFenceHeld,
			messages: []string{"west-new has not reported what it applies yet"},
		},
		"the entry of a replica that is gone does not": {
			in: inputs(active, "west-a"),
			change: func(in *leader) {
				in.Instances = append(in.Instances, entry("west-gone", fenced))
			},
			holding: "True", enforced: "True", reason: fencegatev1alpha1.ReasonFenceHeld,
		},
		"Components still to re-mark hold Enforced back": {
			in:      inputs(active, "west-a"),
			change:  func(in *leader) { in.Marks.Pending = 3 },
			holding: "True", enforced: "False", reason: fencegatev1alpha1.ReasonFenceHeld,
			messages: []string{"the controller is re-marking the Components"},
		},
		"marks made for another state do not count": {
			in:      inputs(active, "west-a"),
			change:  func(in *leader) { in.Marks.Key = fenced.Key() },
			holding: "True", enforced: "False", reason: fencegatev1alpha1.ReasonFenceHeld,
		},
		"no marks at all": {
			in:      inputs(active, "west-a"),
			change:  func(in *leader) { in.Marks = controller.MarkProgress{} },
			holding: "True", enforced: "False", reason: fencegatev1alpha1.ReasonFenceHeld,
		},
		"acquiring, with the takeover's deadline": {
			in: inputs(fencestate.State{Status: fencestate.Acquiring, Cluster: west, Holder: east, Reason: rpctypes.ReasonAcquiring}, "west-a"),
			change: func(in *leader) {
				in.Authority = &fenceobject.AuthorityView{Pending: &fencegatev1alpha1.FenceCluster{Name: "west", UID: "uid-west", Epoch: 2}, LeaseExpiresAt: t0.Add(10 * time.Second)}
			},
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonFenceAcquiring,
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.Pending == nil || st.Pending.Name != "west" || st.LeaseExpiresAt == nil || !st.LeaseExpiresAt.Time.Equal(t0.Add(10*time.Second).Truncate(time.Second)) {
					t.Errorf("pending %+v until %v", st.Pending, st.LeaseExpiresAt)
				}
			},
		},
		"epoch regressed": {
			in:      inputs(fencestate.State{Status: fencestate.EpochRegressed, Cluster: east, Holder: west, Reason: rpctypes.ReasonEpochRegressed, Message: "declared less than before"}, "east-a"),
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonEpochRegressed,
			epoch: "False/EpochRegressed", epochMessage: "declared less than before",
		},
		"restored from a backup: admits nothing, in the agent's words": {
			in:      inputs(fencestate.State{Status: fencestate.Unknown, Cluster: east, Reason: rpctypes.ReasonClusterRestored, Message: "cluster east presents generation 4, older than 6: it looks restored from a backup", ClusterGeneration: 4}, "east-a"),
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonClusterRestored,
			epoch: "Unknown/EpochPending",
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if c := condition(st, fencegatev1alpha1.ConditionHolding); c.Message != "cluster east presents generation 4, older than 6: it looks restored from a backup" {
					t.Errorf("Holding's message %q, want the agent's", c.Message)
				}
				if st.FenceReason != rpctypes.ReasonClusterRestored || st.ClusterGeneration != 4 {
					t.Errorf("fenceReason %q clusterGeneration %d", st.FenceReason, st.ClusterGeneration)
				}
			},
		},
		"a raise refused as too large a step: the holder holds on at the accepted epoch": {
			in: inputs(active, "west-a"),
			change: func(in *leader) {
				in.State.EpochRefused = &fencestate.EpochRefusal{Epoch: 70000, Reason: rpctypes.ReasonEpochStepTooLarge, Message: "epoch 70000 is too far above 2"}
				in.TargetEpoch, in.Generation = 70000, 4
			},
			holding: "True", enforced: "True", reason: fencegatev1alpha1.ReasonFenceHeld,
			epoch: "False/EpochStepTooLarge", epochMessage: "epoch 70000 is too far above 2",
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.Epoch != 2 || st.Cluster.Epoch != 2 {
					t.Errorf("epoch %d, cluster %+v: want the accepted epoch 2, not the refused one", st.Epoch, st.Cluster)
				}
				if st.ObservedGeneration != 0 {
					t.Errorf("observedGeneration %d while generation 4's epoch is refused, want the old one (0)", st.ObservedGeneration)
				}
				if c := condition(st, fencegatev1alpha1.ConditionEpochAccepted); c.ObservedGeneration != 4 {
					t.Errorf("EpochAccepted observes generation %d, want 4: the one whose epoch it judges", c.ObservedGeneration)
				}
			},
		},
		"a leader that started at an epoch refused for its step keeps status.epoch": {
			old: fencegatev1alpha1.ClusterFenceStatus{Epoch: 3, ObservedGeneration: 2},
			in:  inputs(typo, "east-a"),
			change: func(in *leader) {
				in.Generation = 4
			},
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonFenceUnknown,
			epoch: "False/EpochStepTooLarge", epochMessage: "refused epoch 70000 as too far above",
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.Epoch != 3 || st.Cluster.Epoch != 3 {
					t.Errorf("epoch %d, cluster %+v: want 3, the epoch accepted before, not the refused 70000", st.Epoch, st.Cluster)
				}
				if st.ObservedGeneration != 2 {
					t.Errorf("observedGeneration %d while generation 4's epoch is refused, want the old one (2)", st.ObservedGeneration)
				}
			},
		},
		"a leader that started at an epoch refused for its step, with no status.epoch yet": {
			in:      inputs(typo, "east-a"),
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonFenceUnknown,
			epoch: "False/EpochStepTooLarge", epochMessage: "with no status.epoch, delete the Fence",
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.Epoch != 0 || st.Cluster.Epoch != 0 {
					t.Errorf("epoch %d, cluster %+v: want none, no epoch was accepted", st.Epoch, st.Cluster)
				}
			},
		},
		"an epoch refused for its step, lowered in spec.epoch: pending, not below": {
			old: fencegatev1alpha1.ClusterFenceStatus{Epoch: 3},
			in:  inputs(typo, "east-a"),
			change: func(in *leader) {
				in.TargetEpoch = 3
			},
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonFenceUnknown,
			epoch: "Unknown/EpochPending", epochMessage: "has not accepted epoch 3 yet",
		},
		"no answer yet: status.epoch stays": {
			old:     fencegatev1alpha1.ClusterFenceStatus{Epoch: 3},
			in:      inputs(fencestate.State{Status: fencestate.Unknown, Cluster: fencestate.Cluster{Name: "east", Epoch: 70000}, Reason: fencestate.ReasonNoAnswerYet}, "east-a"),
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonFenceUnknown,
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.Epoch != 3 {
					t.Errorf("epoch %d before any answer, want 3 kept", st.Epoch)
				}
			},
		},
		"a leader refused as restored takes the generation its live peers present": {
			old: fencegatev1alpha1.ClusterFenceStatus{ClusterGeneration: 4},
			in:  inputs(restored, "east-a", "east-b", "east-c"),
			change: func(in *leader) {
				in.Instances[1] = withGeneration("east-b", active, 8)
				in.Instances[2] = withGeneration("east-c", active, 6)
				// An instance whose Lease ended does not count.
				in.Instances = append(in.Instances, withGeneration("east-gone", active, 9))
			},
			holding: "False", enforced: "False", reason: fencegatev1alpha1.ReasonClusterRestored,
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.ClusterGeneration != 8 {
					t.Errorf("clusterGeneration %d, want 8: the highest of the live instances'", st.ClusterGeneration)
				}
			},
		},
		"a restored copy, every instance refused, learns no newer generation": {
			old: fencegatev1alpha1.ClusterFenceStatus{ClusterGeneration: 4},
			in:  inputs(restored, "east-a", "east-b"),
			change: func(in *leader) {
				in.Instances[1] = withGeneration("east-b", restored, 3)
			},
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonClusterRestored,
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.ClusterGeneration != 4 {
					t.Errorf("clusterGeneration %d, want the copy's own 4", st.ClusterGeneration)
				}
			},
		},
		"a peer's newer generation is taken, and holds no state back": {
			in: inputs(active, "west-a", "west-b"),
			change: func(in *leader) {
				in.Instances[1] = withGeneration("west-b", active, 12)
			},
			holding: "True", enforced: "True", reason: fencegatev1alpha1.ReasonFenceHeld,
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.ClusterGeneration != 12 {
					t.Errorf("clusterGeneration %d, want west-b's 12", st.ClusterGeneration)
				}
			},
		},
		"the epoch asked for is below the one declared": {
			in:      inputs(active, "west-a"),
			change:  func(in *leader) { in.TargetEpoch = 1 },
			holding: "True", enforced: "True", reason: fencegatev1alpha1.ReasonFenceHeld,
			epoch: "False/EpochBelowAccepted", epochMessage: "goes on declaring 2. Set spec.epoch to 2 or more",
		},
		"a raise not answered yet": {
			in:      inputs(active, "west-a"),
			change:  func(in *leader) { in.TargetEpoch = 3 },
			holding: "True", enforced: "True", reason: fencegatev1alpha1.ReasonFenceHeld,
			epoch: "Unknown/EpochPending", epochMessage: "has not accepted epoch 3 yet",
		},
		"permission denied": {
			in:      inputs(fencestate.State{Status: fencestate.Unknown, Cluster: east, Reason: rpctypes.ReasonPermissionDenied}, "east-a"),
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonPermissionDenied,
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.Holder != nil {
					t.Errorf("holder %+v, want none when none is known", st.Holder)
				}
			},
		},
		"unknown: the authority unreachable": {
			in:      inputs(fencestate.State{Status: fencestate.Unknown, Cluster: east, Reason: fencestate.ReasonAuthorityUnreachable}, "east-a"),
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonFenceUnknown,
			epoch: "Unknown/EpochPending",
		},
		"unsupported authority": {
			in:      inputs(fencestate.State{Status: fencestate.Unsupported, Cluster: east, Reason: fencestate.ReasonUnimplemented}, "east-a"),
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonFenceUnknown,
		},
		"spec.epoch not declared yet: the generation is not observed": {
			in:      inputs(fenced, "east-a"),
			change:  func(in *leader) { in.TargetEpoch = 3; in.Generation = 4 },
			holding: "False", enforced: "True", reason: fencegatev1alpha1.ReasonClusterFenced,
			check: func(t *testing.T, st fencegatev1alpha1.ClusterFenceStatus) {
				if st.ObservedGeneration != 0 {
					t.Errorf("observedGeneration %d while epoch 3 is not declared yet, want the old one (0)", st.ObservedGeneration)
				}
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := tc.in
			if tc.change != nil {
				tc.change(&in)
			}
			st := derive(tc.old, in)
			h, e := condition(st, fencegatev1alpha1.ConditionHolding), condition(st, fencegatev1alpha1.ConditionEnforced)
			if string(h.Status) != tc.holding || string(e.Status) != tc.enforced || h.Reason != tc.reason || e.Reason != tc.reason {
				t.Errorf("Holding %s (%s), Enforced %s (%s); want %s, %s, reason %s", h.Status, h.Reason, e.Status, e.Reason, tc.holding, tc.enforced, tc.reason)
			}
			for _, m := range tc.messages {
				if !strings.Contains(e.Message, m) {
					t.Errorf("Enforced's message %q lacks %q", e.Message, m)
				}
			}
			if a := condition(st, fencegatev1alpha1.ConditionEpochAccepted); tc.epoch != "" && (string(a.Status)+"/"+a.Reason != tc.epoch || !strings.Contains(a.Message, tc.epochMessage)) {
				t.Errorf("EpochAccepted %s/%s %q; want %s with %q", a.Status, a.Reason, a.Message, tc.epoch, tc.epochMessage)
			}
			if tc.check != nil {
				tc.check(t, st)
			}
			// Derived again from itself, later, the status is the same:
			// writing it back changes nothing.
			in.Now = in.Now.Add(time.Minute)
			if again := derive(st, in); !equality.Semantic.DeepEqual(again, st) {
				t.Errorf("not stable:\n%+v\n%+v", st, again)
			}
		})
	}
}

// TestDesiredHeartbeats: a renewal moves the agent's last answer and lease
// but nothing a reader of the Fence needs, so the status stays as it is;
// a change of state moves Since, LastDeclaration and the conditions' times.
func TestDesiredHeartbeats(t *testing.T) {
	st := derive(fencegatev1alpha1.ClusterFenceStatus{}, inputs(active, "west-a"))

	renewed := active
	renewed.LastSuccessNS = t0.Add(5 * time.Second).UnixNano()
	renewed.ValidUntilNS = t0.Add(18 * time.Second).UnixNano()
	in := inputs(renewed, "west-a")
	in.Now = t0.Add(5 * time.Second)
	if got := derive(st, in); !equality.Semantic.DeepEqual(got, st) {
		t.Errorf("a heartbeat changed the status:\n%+v\n%+v", st, got)
	}

	// The authority rotates the cluster's generation: one write, for the
	// cluster's next processes; its heartbeats write nothing again.
	rotated := renewed
	rotated.ClusterGeneration = 8
	in = inputs(rotated, "west-a")
	in.Now = t0.Add(5 * time.Second)
	gen := derive(st, in)
	if gen.ClusterGeneration != 8 {
		t.Errorf("clusterGeneration %d after the agent got generation 8", gen.ClusterGeneration)
	}
	want := st
	want.ClusterGeneration, want.LastDeclaration = 8, gen.LastDeclaration
	if !equality.Semantic.DeepEqual(gen, want) {
		t.Errorf("a new generation changed more than clusterGeneration and lastDeclaration:\n%+v\n%+v", want, gen)
	}
	rotated.LastSuccessNS = t0.Add(10 * time.Second).UnixNano()
	in = inputs(rotated, "west-a")
	in.Now = t0.Add(10 * time.Second)
	if got := derive(gen, in); !equality.Semantic.DeepEqual(got, gen) {
		t.Errorf("a heartbeat at the same generation changed the status:\n%+v\n%+v", gen, got)
	}
	// A state that has no generation yet (a new process before its first
	// answer) keeps the one the status has.
	fresh := rotated
	fresh.ClusterGeneration = 0
	if got := derive(gen, inputs(fresh, "west-a")); got.ClusterGeneration != 8 {
		t.Errorf("clusterGeneration %d from a state without one, want 8 kept", got.ClusterGeneration)
	}

	lost := fencestate.State{Status: fencestate.Unknown, Cluster: west, Holder: west, Reason: fencestate.ReasonLeaseExpired, LastSuccessNS: t0.Add(20 * time.Second).UnixNano()}
	in = inputs(lost, "west-a")
	in.Now = t0.Add(30 * time.Second)
	got := derive(st, in)
	later := metav1.NewTime(t0.Add(30 * time.Second).Truncate(time.Second))
	if !got.Since.Equal(&later) || !got.LastDeclaration.Time.Equal(t0.Add(20*time.Second).Truncate(time.Second)) {
		t.Errorf("since %v lastDeclaration %v after the state changed", got.Since, got.LastDeclaration)
	}
	if h := condition(got, fencegatev1alpha1.ConditionHolding); !h.LastTransitionTime.Equal(&later) {
		t.Errorf("Holding's lastTransitionTime %v, want %v", h.LastTransitionTime, later)
	}
	if e := condition(got, fencegatev1alpha1.ConditionEnforced); e.LastTransitionTime.Equal(&later) {
		t.Errorf("Enforced stayed True; its lastTransitionTime must stay too, got %v", e.LastTransitionTime)
	}
}

func TestDesiredQuiesced(t *testing.T) {
	// kinds are a hold controller's progress for state s: CronJobs with
	// held and quiet ones, and a Kustomization.
	kinds := func(s fencestate.State, held, quiet int, activity ...string) *hold.Progress {
		return &hold.Progress{Resolved: true, Kinds: []hold.KindProgress{
			{Kind: "CronJob.batch", Started: true, Key: s.Key(), Total: held, Held: held, Quiet: quiet, Activity: activity},
			{Kind: "Kustomization.kustomize.toolkit.fluxcd.io", Started: true, Key: s.Key(), Total: 1, Held: 1, Quiet: 1},
		}}
	}
	tests := map[string]struct {
		state   fencestate.State
		holds   *hold.Progress
		old     *fencegatev1alpha1.FenceHeld
		status  metav1.ConditionStatus
		reason  string
		message string
		held    string // status.held.summary; "" for none
	}{
		"no kinds held: cannot tell": {
			state: fenced, status: metav1.ConditionUnknown, reason: fencegatev1alpha1.ReasonNoHeldKinds,
		},
		"every held object quiet": {
			state: fenced, holds: kinds(fenced, 3, 3),
			status: metav1.ConditionTrue, reason: fencegatev1alpha1.ReasonQuiesced, message: "every held object (4) has gone quiet", held: "4/4 quiet",
		},
		"a Job still running": {
			state: fenced, holds: kinds(fenced, 3, 2, "CronJob billing/report: 1 Job still running"),
			status: metav1.ConditionFalse, reason: fencegatev1alpha1.ReasonNotQuiet, message: "1 of 4 held objects have not gone quiet: CronJob billing/report: 1 Job still running", held: "3/4 quiet",
		},
		"holds still being decided for this state keep the old counts": {
			state: fenced, holds: func() *hold.Progress { p := kinds(fenced, 3, 3); p.Kinds[0].Pending = 2; return p }(),
			old:    &fencegatev1alpha1.FenceHeld{Summary: "0/0 quiet"},
			status: metav1.ConditionFalse, reason: fencegatev1alpha1.ReasonHoldsPending, message: "2 not yet", held: "0/0 quiet",
		},
		"counts for another state do not count": {
			state: fenced, holds: kinds(active, 0, 0),
			status: metav1.ConditionFalse, reason: fencegatev1alpha1.ReasonHoldsPending,
		},
		"kinds not looked up yet": {
			state: fenced, holds: func() *hold.Progress { p := kinds(fenced, 3, 3); p.Resolved = false; return p }(),
			status: metav1.ConditionFalse, reason: fencegatev1alpha1.ReasonHoldsPending,
		},
		"the holder's actuators act": {
			state: active, holds: &hold.Progress{Resolved: true, Kinds: []hold.KindProgress{{Kind: "CronJob.batch", Started: true, Key: active.Key(), Total: 5}}},
			status: metav1.ConditionFalse, reason: fencegatev1alpha1.ReasonFenceHeld, held: "0/0 quiet",
		},
		"the holder's actuators stay held during its takeover grace": {
			state:  func() fencestate.State { s := active; s.ResumeAtNS = t0.Add(time.Hour).UnixNano(); return s }(),
			holds:  &hold.Progress{Resolved: true, Kinds: []hold.KindProgress{{Kind: "CronJob.batch", Started: true, Key: active.Key(), Total: 5, Held: 5}}},
			status: metav1.ConditionFalse, reason: fencegatev1alpha1.ReasonFenceHeld, message: "stay held until", held: "0/5 quiet",
		},
		"a kind the API server does not serve is named": {
			state: fenced, holds: func() *hold.Progress {
				p := kinds(fenced, 1, 1)
				p.Unserved = []string{"schedules.velero.io"}
				return p
			}(),
			status: metav1.ConditionTrue, reason: fencegatev1alpha1.ReasonQuiesced, message: "the API server serves none of schedules.velero.io", held: "2/2 quiet",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			in := inputs(tc.state, "east-a")
			in.Holds = tc.holds
			st := derive(fencegatev1alpha1.ClusterFenceStatus{Held: tc.old}, in)
			c := condition(st, fencegatev1alpha1.ConditionQuiesced)
			if c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.message) {
				t.Errorf("Quiesced = %s/%s %q, want %s/%s containing %q", c.Status, c.Reason, c.Message, tc.status, tc.reason, tc.message)
			}
			summary := ""
			if st.Held != nil {
				summary = st.Held.Summary
			}
			if summary != tc.held {
				t.Errorf("status.held = %+v, want summary %q", st.Held, tc.held)
			}
			if again := derive(st, in); !equality.Semantic.DeepEqual(again, st) {
				t.Errorf("deriving again from the result changes it:\n%+v\n%+v", st, again)
			}
		})
	}
}
