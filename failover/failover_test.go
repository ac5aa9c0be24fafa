package failover_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/failover"
	"github.com/fencegate/fencegate/fencestate"
)

// fence builds a Fence of cluster name at epoch in state, with its
// conditions' status, reason and transition time, its holder and its
// replicas' states, and an EpochAccepted condition False for refused (a
// reason) when set.
type fence struct {
	name      string
	epoch     int64
	state     string
	reason    string
	fenceWhy  string
	holding   bool
	enforced  bool
	holder    string
	holderEp  int64
	pending   *fencegatev1alpha1.FenceCluster
	replicas  []string
	observed  int64
	generated int64
	at        time.Time
	refused   string
	// undecided adds EpochAccepted Unknown (EpochPending) at the Fence's
	// generation.
	undecided bool
	// quiesced adds the Quiesced condition, "status/reason", and two held
	// objects, or none with heldNone.
	quiesced string
	heldNone bool
}

func (b fence) build() *fencegatev1alpha1.Fence {
	status := func(ok bool) metav1.ConditionStatus {
		if ok {
			return metav1.ConditionTrue
		}
		return metav1.ConditionFalse
	}
	f := &fencegatev1alpha1.Fence{
		ObjectMeta: metav1.ObjectMeta{Name: "default", Generation: max(b.generated, 1)},
		Status: fencegatev1alpha1.ClusterFenceStatus{
			Cluster: &fencegatev1alpha1.FenceCluster{Name: b.name, Epoch: b.epoch}, Epoch: b.epoch, State: b.state, FenceReason: b.fenceWhy,
			Pending: b.pending, ObservedGeneration: max(b.observed, 1),
			Conditions: []metav1.Condition{
				{Type: fencegatev1alpha1.ConditionHolding, Status: status(b.holding), Reason: b.reason, Message: "the policies' words", LastTransitionTime: metav1.NewTime(b.at)},
				{Type: fencegatev1alpha1.ConditionEnforced, Status: status(b.enforced), Reason: b.reason, LastTransitionTime: metav1.NewTime(b.at)},
			},
			Components: &fencegatev1alpha1.FenceComponents{Summary: "0/1 held"},
		},
	}
	if b.refused != "" {
		f.Status.Conditions = append(f.Status.Conditions, metav1.Condition{
			Type: fencegatev1alpha1.ConditionEpochAccepted, Status: metav1.ConditionFalse, Reason: b.refused,
			Message: "the authority's words", ObservedGeneration: f.Generation,
		})
	}
	if b.undecided {
		f.Status.Conditions = append(f.Status.Conditions, metav1.Condition{
			Type: fencegatev1alpha1.ConditionEpochAccepted, Status: metav1.ConditionUnknown, Reason: fencegatev1alpha1.ReasonEpochPending,
			Message: "the authority's words", ObservedGeneration: f.Generation,
		})
	}
	if b.holder != "" {
		f.Status.Holder = &fencegatev1alpha1.FenceCluster{Name: b.holder, Epoch: b.holderEp}
	}
	if status, reason, ok := strings.Cut(b.quiesced, "/"); ok {
		f.Status.Conditions = append(f.Status.Conditions, metav1.Condition{
			Type: fencegatev1alpha1.ConditionQuiesced, Status: metav1.ConditionStatus(status), Reason: reason, Message: "the hold controller's words",
		})
		f.Status.Held = &fencegatev1alpha1.FenceHeld{Held: 2, Summary: "2/2 quiet"}
		if b.heldNone {
			f.Status.Held = &fencegatev1alpha1.FenceHeld{Summary: "0/0 quiet"}
		}
	}
	for i, s := range b.replicas {
		f.Status.Instances = append(f.Status.Instances, fencegatev1alpha1.FenceInstance{Name: b.name + "-" + string(rune('a'+i)), State: s})
	}
	return f
}

var (
	westFenced = fence{name: "west", epoch: 1, state: "fenced", reason: "ClusterFenced", enforced: true, holder: "east", holderEp: 2, replicas: []string{"fenced", "fenced"}}
	eastActive = fence{name: "east", epoch: 2, state: "active", reason: "FenceHeld", holding: true, enforced: true, holder: "east", holderEp: 2, replicas: []string{"active"}}
)

func TestMakePlan(t *testing.T) {
	tests := map[string]struct {
		target, from *fencegatev1alpha1.Fence
		epoch        uint64
		want         failover.Plan
		wantErr      string
	}{
		"one above the holder's epoch": {
			target: westFenced.build(), from: eastActive.build(),
			want: failover.Plan{Epoch: 3, Patch: true, Holder: "east", HolderEpoch: 2, Highest: 2},
		},
		"the old holder unreachable: the target knows the holder": {
			target: westFenced.build(),
			want:   failover.Plan{Epoch: 3, Patch: true, Holder: "east", HolderEpoch: 2, Highest: 2},
		},
		"the old holder knows a higher epoch than the target heard of": {
			target: westFenced.build(), from: func() *fencegatev1alpha1.Fence { b := eastActive; b.epoch = 5; return b.build() }(),
			want: failover.Plan{Epoch: 6, Patch: true, Holder: "east", HolderEpoch: 5, Highest: 5},
		},
		"a takeover by a third cluster is pending": {
			target: func() *fencegatev1alpha1.Fence {
				b := westFenced
				b.pending = &fencegatev1alpha1.FenceCluster{Name: "north", Epoch: 4}
				return b.build()
			}(),
			want: failover.Plan{Epoch: 5, Patch: true, Holder: "north", HolderEpoch: 4, Highest: 4},
		},
		"a copy restored from a backup: one above the epoch it declares, which the original may hold": {
			target: fence{name: "east", epoch: 4, state: "unknown", reason: "ClusterRestored", fenceWhy: "CLUSTER_RESTORED", enforced: true}.build(),
			want:   failover.Plan{Epoch: 5, Patch: true, Holder: "east", HolderEpoch: 4, Highest: 4},
		},
		"a copy restored from a backup, whose original is known to be fenced by a higher epoch": {
			target: fence{name: "east", epoch: 4, state: "unknown", reason: "ClusterRestored", fenceWhy: "CLUSTER_RESTORED", enforced: true}.build(),
			from: func() *fencegatev1alpha1.Fence {
				b := eastActive
				b.name, b.epoch, b.holderEp = "west", 6, 6
				return b.build()
			}(),
			want: failover.Plan{Epoch: 7, Patch: true, Holder: "west", HolderEpoch: 6, Highest: 6},
		},
		"an epoch asked for": {
			target: westFenced.build(), epoch: 10,
			want: failover.Plan{Epoch: 10, Patch: true, Holder: "east", HolderEpoch: 2, Highest: 2},
		},
		"an epoch asked for that would not move the fence": {
			target: westFenced.build(), epoch: 2,
			wantErr: "--epoch 2 is not above the epoch 2 of the holder east",
		},
		"the target declares enough already: wait only": {
			target: func() *fencegatev1alpha1.Fence {
				b := westFenced
				b.state, b.epoch, b.reason = "acquiring", 3, "FenceAcquiring"
				return b.build()
			}(),
			want: failover.Plan{Epoch: 3, Patch: false, Holder: "east", HolderEpoch: 2, Highest: 3},
		},
		"the target holds the fence already": {
			target: eastActive.build(), wantErr: "the target holds the fence already: east holds the fence",
		},
		"no holder known": {
			target:  fence{name: "west", epoch: 1, state: "unknown", reason: "FenceUnknown", fenceWhy: fencestate.ReasonNoAnswerYet}.build(),
			wantErr: "the holder's epoch is not known: west says unknown at epoch 1",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := failover.MakePlan(tc.target, tc.from, tc.epoch)
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one with %q", err, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case got != tc.want:
				t.Errorf("plan %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := failover.MakePlan(eastActive.build(), nil, 0); !errors.Is(err, failover.ErrAlreadyHolding) {
		t.Errorf("a holder as the target: %v, want ErrAlreadyHolding", err)
	}
}

func TestCheckStep(t *testing.T) {
	// The authority refuses an epoch more than its max step above the
	// highest epoch of the domain; the plan knows the highest the Fences
	// show. West is fenced at epoch 1, east holds at epoch 2.
	tests := map[string]struct {
		target, from *fencegatev1alpha1.Fence
		epoch        uint64
		maxStep      uint64
		wantErr      string
	}{
		"one above the holder's": {
			target: westFenced.build(), from: eastActive.build(), maxStep: 1000,
		},
		"an epoch as far above as the step allows": {
			target: westFenced.build(), from: eastActive.build(), epoch: 1002, maxStep: 1000,
		},
		"one past the step": {
			target: westFenced.build(), from: eastActive.build(), epoch: 1003, maxStep: 1000,
			wantErr: "epoch 1003 is 1001 above epoch 2, the highest epoch the Fences show, more than the fence authority's max epoch step 1000: " +
				"the authority would refuse it (EPOCH_STEP_TOO_LARGE) and the fence would not move; nothing was changed. " +
				"Ask for an epoch of at most 1002 (3, one above the holder's, is enough: leave --epoch out to ask for it), or pass the authority's own --max-epoch-step if it runs with a larger one",
		},
		"an authority with a smaller step": {
			target: westFenced.build(), epoch: 10, maxStep: 5,
			wantErr: "epoch 10 is 8 above epoch 2",
		},
		"measured from the target's own epoch when it is the highest": {
			target: fence{name: "west", epoch: 40, state: "fenced", reason: "ClusterFenced", holder: "east", holderEp: 30}.build(), epoch: 45, maxStep: 5,
		},
		"measured from the old holder's epoch when it is the highest": {
			target: westFenced.build(), from: fence{name: "east", epoch: 9, state: "fenced", reason: "ClusterFenced", holder: "east", holderEp: 2}.build(), epoch: 15, maxStep: 5,
			wantErr: "epoch 15 is 6 above epoch 9",
		},
		"an epoch the authority refused is no highest": {
			target: fence{name: "west", epoch: 5000, state: "unknown", reason: "FenceUnknown", fenceWhy: rpctypes.ReasonEpochStepTooLarge, holder: "east", holderEp: 2}.build(),
			epoch:  5000, maxStep: 1000,
			wantErr: "epoch 5000 is 4998 above epoch 2",
		},
		"no epoch known: the authority may know one": {
			target: fence{name: "west", state: "unknown", reason: "FenceUnknown", fenceWhy: fencestate.ReasonNoAnswerYet}.build(), epoch: 5000, maxStep: 1000,
		},
		"a step as large as can be": {
			target: westFenced.build(), epoch: math.MaxUint64, maxStep: math.MaxUint64,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			plan, err := failover.MakePlan(tc.target, tc.from, tc.epoch)
			if err != nil {
				t.Fatal(err)
			}
			err = plan.CheckStep(tc.maxStep)
			var stepErr *failover.StepError
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("plan %+v refused: %v", plan, err)
			case tc.wantErr != "" && (!errors.As(err, &stepErr) || !strings.Contains(err.Error(), tc.wantErr)):
				t.Errorf("plan %+v: error %v, want a *StepError with %q", plan, err, tc.wantErr)
			}
		})
	}
}

func TestProgress(t *testing.T) {
	// Each case is a sequence of observations of the target (west, asked
	// for epoch 3 by generation 2) and the old holder (east).
	type obs struct {
		target, holder fence
		steps          []failover.Step
		done           bool
		quiesced       bool
		// refused is the refusal's start; message the Fence's words it
		// quotes, "the policies' words" unless set.
		refused, message string
	}
	acquiring := fence{name: "west", epoch: 3, state: "acquiring", reason: "FenceAcquiring", enforced: true, holder: "east", holderEp: 2, replicas: []string{"acquiring", "acquiring"}, observed: 2, generated: 2}
	granted := fence{name: "west", epoch: 3, state: "active", reason: "FenceHeld", holding: true, holder: "west", holderEp: 3, replicas: []string{"active", "acquiring"}, observed: 2, generated: 2}
	westDone := granted
	westDone.enforced, westDone.replicas = true, []string{"active", "active"}
	// Told of west's takeover, east still holds it until it releases; its
	// Fence names west as the pending takeover.
	told := fence{name: "east", epoch: 2, state: "fenced", reason: "ClusterFenced", holder: "east", holderEp: 2, pending: &fencegatev1alpha1.FenceCluster{Name: "west", Epoch: 3}, replicas: []string{"active"}}
	stopped := told
	stopped.replicas = []string{"fenced"}
	eastDone := stopped
	eastDone.enforced, eastDone.holder, eastDone.holderEp, eastDone.pending = true, "west", 3, nil
	before := westFenced
	before.generated = 2
	// staleEast is east's Fence as a status writer stuck since the failover
	// before wrote it: fenced by west at epoch 1, enforced, from then.
	staleEast := fence{name: "east", epoch: 1, state: "fenced", reason: "ClusterFenced", enforced: true, holder: "west", holderEp: 1, replicas: []string{"fenced"}}
	// raised is when the failover raised west's spec.epoch; eastAt is
	// eastDone with its conditions changed at a time.
	raised := time.Date(2030, 1, 2, 3, 4, 5, 700_000_000, time.UTC)
	eastAt := func(at time.Time) fence { b := eastDone; b.at = at; return b }
	// refusedStep is west refused epoch 3 as too large a step: it goes on
	// declaring epoch 1.
	refusedStep := before
	refusedStep.refused = fencegatev1alpha1.ReasonEpochStepTooLarge

	tests := map[string]struct {
		withHolder bool
		raised     time.Time
		stale      string
		seq        []obs
	}{
		"a failover step by step": {
			withHolder: true,
			seq: []obs{
				{target: before, holder: eastActive},
				{target: acquiring, holder: eastActive, steps: []failover.Step{failover.StepDeclared}},
				{target: acquiring, holder: told, steps: []failover.Step{failover.StepHolderTold}},
				{target: acquiring, holder: stopped, steps: []failover.Step{failover.StepHolderStopped}},
				{target: acquiring, holder: func() fence { b := stopped; b.quiesced = "False/NotQuiet"; return b }(), steps: []failover.Step{failover.StepHolderHeld}},
				{target: granted, holder: stopped, steps: []failover.Step{failover.StepGranted}},
				{target: westDone, holder: stopped, steps: []failover.Step{failover.StepTargetMarked}},
				{target: westDone, holder: eastDone, steps: []failover.Step{failover.StepHolderMarked}, done: true},
			},
		},
		"the old holder quiesces once the failover is done": {
			withHolder: true,
			seq: []obs{
				{target: westDone, holder: func() fence { b := eastDone; b.quiesced = "False/HoldsPending"; return b }(), steps: []failover.Step{failover.StepDeclared, failover.StepHolderTold, failover.StepHolderStopped, failover.StepHolderMarked, failover.StepGranted, failover.StepTargetMarked}, done: true},
				{target: westDone, holder: func() fence { b := eastDone; b.quiesced = "False/NotQuiet"; return b }(), steps: []failover.Step{failover.StepHolderHeld}, done: true},
				{target: westDone, holder: func() fence { b := eastDone; b.quiesced = "True/Quiesced"; return b }(), steps: []failover.Step{failover.StepHolderQuiesced}, done: true, quiesced: true},
			},
		},
		"an old holder that holds no actuators has nothing to quiesce": {
			withHolder: true,
			seq: []obs{
				{target: westDone, holder: func() fence { b := eastDone; b.quiesced = "Unknown/NoHeldKinds"; return b }(), steps: []failover.Step{failover.StepDeclared, failover.StepHolderTold, failover.StepHolderStopped, failover.StepHolderMarked, failover.StepHolderHeld, failover.StepHolderQuiesced, failover.StepGranted, failover.StepTargetMarked}, done: true, quiesced: true},
			},
		},
		"the new holder resumes its actuators once it holds none, not during its takeover grace": {
			withHolder: true,
			seq: []obs{
				{target: func() fence { b := westDone; b.quiesced = "False/FenceHeld"; return b }(), holder: eastDone, steps: []failover.Step{failover.StepDeclared, failover.StepHolderTold, failover.StepHolderStopped, failover.StepHolderMarked, failover.StepGranted, failover.StepTargetMarked}, done: true},
				{target: func() fence { b := westDone; b.quiesced = "False/FenceHeld"; b.heldNone = true; return b }(), holder: eastDone, steps: []failover.Step{failover.StepTargetResumed}, done: true},
			},
		},
		"the holder's actuators act while it holds the fence": {
			withHolder: true,
			seq: []obs{
				{target: before, holder: func() fence { b := eastActive; b.quiesced = "False/FenceHeld"; return b }()},
			},
		},
		"the old holder's Fence shows all its steps at once, and before the target's": {
			withHolder: true,
			seq: []obs{
				{target: before, holder: eastDone, steps: []failover.Step{failover.StepHolderTold, failover.StepHolderStopped, failover.StepHolderMarked}},
				{target: westDone, holder: eastDone, steps: []failover.Step{failover.StepDeclared, failover.StepGranted, failover.StepTargetMarked}, done: true},
			},
		},
		"a stale old holder from the failover before marks nothing": {
			withHolder: true,
			seq: []obs{
				{target: before, holder: staleEast},
				{target: westDone, holder: staleEast, steps: []failover.Step{failover.StepDeclared, failover.StepGranted, failover.StepTargetMarked}},
			},
		},
		"an old holder whose conditions changed before the raise marks nothing": {
			withHolder: true, raised: raised,
			seq: []obs{
				{target: westDone, holder: eastAt(raised.Add(-time.Minute)), steps: []failover.Step{failover.StepDeclared, failover.StepGranted, failover.StepTargetMarked}},
			},
		},
		"an old holder whose conditions changed in the second of the raise": {
			withHolder: true, raised: raised,
			seq: []obs{
				{target: westDone, holder: eastAt(raised.Truncate(time.Second)), steps: []failover.Step{failover.StepDeclared, failover.StepHolderTold, failover.StepHolderStopped, failover.StepHolderMarked, failover.StepGranted, failover.StepTargetMarked}, done: true},
			},
		},
		"an old holder's clock a second behind": {
			withHolder: true, raised: raised,
			seq: []obs{
				{target: westDone, holder: eastAt(raised.Truncate(time.Second).Add(-time.Second)), steps: []failover.Step{failover.StepDeclared, failover.StepHolderTold, failover.StepHolderStopped, failover.StepHolderMarked, failover.StepGranted, failover.StepTargetMarked}, done: true},
			},
		},
		"an old holder that names the target below the epoch asked for marks nothing": {
			withHolder: true,
			seq: []obs{
				{target: westDone, holder: func() fence { b := eastDone; b.holderEp = 2; return b }(), steps: []failover.Step{failover.StepDeclared, failover.StepGranted, failover.StepTargetMarked}},
			},
		},
		"without the old holder, done once the target enforces": {
			seq: []obs{
				{target: granted, steps: []failover.Step{failover.StepDeclared, failover.StepGranted}},
				{target: westDone, steps: []failover.Step{failover.StepTargetMarked}, done: true},
			},
		},
		"a status of the generation before is not the answer": {
			seq: []obs{
				{target: func() fence { b := westDone; b.observed = 1; return b }(), steps: []failover.Step{failover.StepDeclared, failover.StepGranted}},
			},
		},
		"regressed": {
			seq: []obs{
				{target: fence{name: "west", epoch: 3, state: "epoch_regressed", reason: "EpochRegressed", enforced: true, holder: "east", holderEp: 2}, steps: []failover.Step{failover.StepDeclared}, refused: "west is regressed"},
			},
		},
		"regressed before the answer to the new epoch is no refusal yet": {
			seq: []obs{
				{target: fence{name: "west", epoch: 1, state: "epoch_regressed", reason: "EpochRegressed", enforced: true, holder: "east", holderEp: 2}},
			},
		},
		"permission denied": {
			seq: []obs{
				{target: fence{name: "west", epoch: 3, state: "unknown", reason: "PermissionDenied", fenceWhy: rpctypes.ReasonPermissionDenied}, steps: []failover.Step{failover.StepDeclared}, refused: "permission denied"},
			},
		},
		"the authority unreachable": {
			seq: []obs{
				{target: fence{name: "west", epoch: 3, state: "unknown", reason: "FenceUnknown", fenceWhy: fencestate.ReasonAuthorityUnreachable}, steps: []failover.Step{failover.StepDeclared}, refused: "the authority is unreachable from west"},
			},
		},
		"the authority refuses the epoch's step": {
			seq: []obs{
				{target: refusedStep, refused: "the fence authority refuses epoch 3 for west as too far above the highest epoch of the domain (EPOCH_STEP_TOO_LARGE), and west goes on declaring epoch 1: run the failover again with a lower --epoch", message: "the authority's words"},
			},
		},
		"a refusal of the generation before the raise is no answer yet": {
			seq: []obs{
				{target: func() fence { b := refusedStep; b.generated = 1; return b }()},
			},
		},
		"the refusal the target showed before the raise is no answer yet": {
			stale: "the authority's words",
			seq: []obs{
				{target: refusedStep},
			},
		},
		"the authority unreachable from the target, which saw the raise but cannot declare it": {
			seq: []obs{
				{target: func() fence {
					b := before
					b.state, b.reason, b.fenceWhy, b.undecided = "unknown", "FenceUnknown", fencestate.ReasonAuthorityUnreachable, true
					return b
				}(), refused: "the authority is unreachable from west"},
			},
		},
		"the authority unreachable in a status from before the raise: not refused yet": {
			seq: []obs{
				{target: func() fence {
					b := before
					b.state, b.reason, b.fenceWhy = "unknown", "FenceUnknown", fencestate.ReasonAuthorityUnreachable
					return b
				}()},
			},
		},
		"a regressed target that saw the raise but has no answer yet: not refused": {
			seq: []obs{
				{target: func() fence {
					b := before
					b.state, b.reason, b.undecided = "epoch_regressed", "EpochRegressed", true
					return b
				}()},
			},
		},
		"another reason the authority does not accept the epoch": {
			seq: []obs{
				{target: func() fence { b := before; b.refused = fencegatev1alpha1.ReasonEpochRegressed; return b }(), refused: "the fence authority does not accept epoch 3 for west (EpochAccepted False, EpochRegressed)", message: "the authority's words"},
			},
		},
		"the first epoch the target declares is too large a step": {
			seq: []obs{
				{target: fence{name: "west", epoch: 3, state: "unknown", reason: "FenceUnknown", fenceWhy: rpctypes.ReasonEpochStepTooLarge}, steps: []failover.Step{failover.StepDeclared}, refused: "the fence authority refuses epoch 3 for west as too far above"},
			},
		},
		"a third cluster holds at a higher epoch": {
			seq: []obs{
				{target: fence{name: "west", epoch: 3, state: "fenced", reason: "ClusterFenced", holder: "north", holderEp: 4}, steps: []failover.Step{failover.StepDeclared}, refused: "north holds the fence at epoch 4, not below the 3 asked for: pass --epoch 5"},
			},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			p := &failover.Progress{Epoch: 3, Generation: 2, WithHolder: tc.withHolder, Raised: tc.raised, StaleRefusal: tc.stale}
			for i, o := range tc.seq {
				var holder *fencegatev1alpha1.Fence
				if o.holder.name != "" {
					holder = o.holder.build()
				}
				got := p.Observe(o.target.build(), holder)
				var steps []failover.Step
				for _, s := range got.Steps {
					steps = append(steps, s.Step)
				}
				if !slices.Equal(steps, o.steps) || got.Done != o.done || got.Quiesced != o.quiesced {
					t.Errorf("observation %d: steps %v done %v quiesced %v, want %v done %v quiesced %v", i, steps, got.Done, got.Quiesced, o.steps, o.done, o.quiesced)
				}
				message := o.message
				if message == "" {
					message = "the policies' words"
				}
				switch {
				case o.refused == "" && got.Refused != nil:
					t.Errorf("observation %d: refused %v", i, got.Refused)
				case o.refused != "" && (got.Refused == nil || !strings.Contains(got.Refused.Error(), o.refused) || !strings.Contains(got.Refused.Error(), message)):
					t.Errorf("observation %d: refused %v, want %q with the Fence's message %q", i, got.Refused, o.refused, message)
				}
			}
		})
	}
}

// TestStepNamesAreUnique: each step of the timeline has a name of its own,
// so that a person reading it can tell which side each line is about.
func TestStepNamesAreUnique(t *testing.T) {
	seen := map[string]failover.Step{}
	for s := failover.StepDeclared; s <= failover.StepTargetMarked; s++ {
		name := s.String()
		if name == "" {
			t.Errorf("step %d has no name", s)
		}
		if other, ok := seen[name]; ok {
			t.Errorf("steps %d and %d are both named %q", other, s, name)
		}
		seen[name] = s
	}
}
