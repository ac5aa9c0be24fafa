package failover_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/failover"
	"github.com/fencegate/fencegate/fenceagent"
)

// fence builds a Fence of cluster name at epoch in state, with its
// conditions' status and reason, its holder and its replicas' states.
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
				{Type: fencegatev1alpha1.ConditionHolding, Status: status(b.holding), Reason: b.reason, Message: "the policies' words"},
				{Type: fencegatev1alpha1.ConditionEnforced, Status: status(b.enforced), Reason: b.reason},
			},
			Components: &fencegatev1alpha1.FenceComponents{Summary: "0/1 held"},
		},
	}
	if b.holder != "" {
		f.Status.Holder = &fencegatev1alpha1.FenceCluster{Name: b.holder, Epoch: b.holderEp}
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
			want: failover.Plan{Epoch: 3, Patch: true, Holder: "east", HolderEpoch: 2},
		},
		"the old holder unreachable: the target knows the holder": {
			target: westFenced.build(),
			want:   failover.Plan{Epoch: 3, Patch: true, Holder: "east", HolderEpoch: 2},
		},
		"the old holder knows a higher epoch than the target heard of": {
			target: westFenced.build(), from: func() *fencegatev1alpha1.Fence { b := eastActive; b.epoch = 5; return b.build() }(),
			want: failover.Plan{Epoch: 6, Patch: true, Holder: "east", HolderEpoch: 5},
		},
		"a takeover by a third cluster is pending": {
			target: func() *fencegatev1alpha1.Fence {
				b := westFenced
				b.pending = &fencegatev1alpha1.FenceCluster{Name: "north", Epoch: 4}
				return b.build()
			}(),
			want: failover.Plan{Epoch: 5, Patch: true, Holder: "north", HolderEpoch: 4},
		},
		"an epoch asked for": {
			target: westFenced.build(), epoch: 10,
			want: failover.Plan{Epoch: 10, Patch: true, Holder: "east", HolderEpoch: 2},
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
			want: failover.Plan{Epoch: 3, Patch: false, Holder: "east", HolderEpoch: 2},
		},
		"the target holds the fence already": {
			target: eastActive.build(), wantErr: "the target holds the fence already: east holds the fence",
		},
		"no holder known": {
			target:  fence{name: "west", epoch: 1, state: "unknown", reason: "FenceUnknown", fenceWhy: fenceagent.ReasonNoAnswerYet}.build(),
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

func TestProgress(t *testing.T) {
	// Each case is a sequence of observations of the target (west, asked
	// for epoch 3 by generation 2) and the old holder (east).
	type obs struct {
		target, holder fence
		steps          []failover.Step
		done           bool
		refused        string
	}
	acquiring := fence{name: "west", epoch: 3, state: "acquiring", reason: "FenceAcquiring", enforced: true, holder: "east", holderEp: 2, replicas: []string{"acquiring", "acquiring"}, observed: 2, generated: 2}
	granted := fence{name: "west", epoch: 3, state: "active", reason: "FenceHeld", holding: true, holder: "west", holderEp: 3, replicas: []string{"active", "acquiring"}, observed: 2, generated: 2}
	westDone := granted
	westDone.enforced, westDone.replicas = true, []string{"active", "active"}
	told := fence{name: "east", epoch: 2, state: "fenced", reason: "ClusterFenced", holder: "east", holderEp: 2, replicas: []string{"active"}}
	stopped := told
	stopped.replicas = []string{"fenced"}
	eastDone := stopped
	eastDone.enforced, eastDone.holder, eastDone.holderEp = true, "west", 3
	before := westFenced
	before.generated = 2

	tests := map[string]struct {
		withHolder bool
		seq        []obs
	}{
		"a failover step by step": {
			withHolder: true,
			seq: []obs{
				{target: before, holder: eastActive},
				{target: acquiring, holder: eastActive, steps: []failover.Step{failover.StepDeclared}},
				{target: acquiring, holder: told, steps: []failover.Step{failover.StepHolderTold}},
				{target: acquiring, holder: stopped, steps: []failover.Step{failover.StepHolderStopped}},
				{target: granted, holder: stopped, steps: []failover.Step{failover.StepGranted}},
				{target: westDone, holder: stopped, steps: []failover.Step{failover.StepTargetMarked}},
				{target: westDone, holder: eastDone, steps: []failover.Step{failover.StepHolderMarked}, done: true},
			},
		},
		"the old holder's Fence shows all its steps at once, and before the target's": {
			withHolder: true,
			seq: []obs{
				{target: before, holder: eastDone, steps: []failover.Step{failover.StepHolderTold, failover.StepHolderStopped, failover.StepHolderMarked}},
				{target: westDone, holder: eastDone, steps: []failover.Step{failover.StepDeclared, failover.StepGranted, failover.StepTargetMarked}, done: true},
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
				{target: fence{name: "west", epoch: 3, state: "unknown", reason: "FenceUnknown", fenceWhy: fenceagent.ReasonAuthorityUnreachable}, steps: []failover.Step{failover.StepDeclared}, refused: "the authority is unreachable from west"},
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
			p := &failover.Progress{Epoch: 3, Generation: 2, WithHolder: tc.withHolder}
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
				if !slices.Equal(steps, o.steps) || got.Done != o.done {
					t.Errorf("observation %d: steps %v done %v, want %v done %v", i, steps, got.Done, o.steps, o.done)
				}
				switch {
				case o.refused == "" && got.Refused != nil:
					t.Errorf("observation %d: refused %v", i, got.Refused)
				case o.refused != "" && (got.Refused == nil || !strings.Contains(got.Refused.Error(), o.refused) || !strings.Contains(got.Refused.Error(), "the policies' words")):
					t.Errorf("observation %d: refused %v, want %q with the Fence's message", i, got.Refused, o.refused)
				}
			}
		})
	}
}
