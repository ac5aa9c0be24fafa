package fenceobject

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/cluster"
)

// recordingAgent records what an instance hands its agent. Like the fence
// agent it refuses an epoch below the one it declares (after a refused
// raise, the last accepted one).
type recordingAgent struct {
	declared  uint64
	setEpochs []uint64
	adopted   uint64
}

func (a *recordingAgent) SetEpoch(_ context.Context, epoch uint64) error {
	a.setEpochs = append(a.setEpochs, epoch)
	if epoch < a.declared {
		return fmt.Errorf("epoch %d is below epoch %d that this agent declares", epoch, a.declared)
	}
	a.declared = epoch
	return nil
}

func (a *recordingAgent) AdoptClusterGeneration(g uint64) { a.adopted = max(a.adopted, g) }

// TestEpochSyncFollowsTheFence: what an instance hands its agent from the
// Fence on a real API server, and the Fence it makes again when someone
// deleted it. Each case syncs three times, as three events would: nothing
// it does is repeated or logged again by the later ones.
func TestEpochSyncFollowsTheFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "fenceobject"})

	// typo is an agent that started at spec.epoch 70000, which the
	// authority refused for its step, with no epoch accepted before.
	typo := fencestate.State{Status: fencestate.Unknown, Cluster: fencestate.Cluster{Name: "east", Epoch: 70000}, Reason: rpctypes.ReasonEpochStepTooLarge}
	tests := map[string]struct {
		// fence is the Fence before the syncs; nil: missing.
		fence *fencegatev1alpha1.Fence
		floor uint64
		// state is the agent's, if any; handed is the epoch the instance
		// handed the agent before (0: none yet).
		state  *fencestate.State
		handed uint64
		// setEpochs and adopted are what the agent must have been
		// handed; spec the spec.epoch of the Fence after the syncs.
		setEpochs []uint64
		adopted   uint64
		spec      *int64
		// logs are parts of the log lines, one each.
		logs []string
	}{
		"the first sync hands over the epoch asked for": {
			fence: &fencegatev1alpha1.Fence{}, floor: 2, setEpochs: []uint64{2},
		},
		"a raised spec.epoch is handed over": {
			fence: &fencegatev1alpha1.Fence{Spec: fencegatev1alpha1.FenceSpec{Epoch: ptr.To[int64](5)}}, floor: 1,
			state: &fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Name: "east", Epoch: 1}}, handed: 1,
			setEpochs: []uint64{5}, spec: ptr.To[int64](5),
			logs: []string{`"epoch"=5 "previousEpoch"=1`},
		},
		"the generation the status keeps is adopted": {
			fence: &fencegatev1alpha1.Fence{Status: fencegatev1alpha1.ClusterFenceStatus{ClusterGeneration: 7}}, floor: 1,
			state: &fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Name: "east", Epoch: 1}, ClusterGeneration: 6}, handed: 1,
			adopted: 7,
		},
		"a refused typo taken back is handed over": {
			fence: &fencegatev1alpha1.Fence{Spec: fencegatev1alpha1.FenceSpec{Epoch: ptr.To[int64](3)}}, floor: 1,
			state: &fencestate.State{
				Status: fencestate.Active, Cluster: fencestate.Cluster{Name: "east", Epoch: 3},
				EpochRefused: &fencestate.EpochRefusal{Epoch: 70000, Reason: rpctypes.ReasonEpochStepTooLarge},
			},
			handed: 70000, setEpochs: []uint64{3}, spec: ptr.To[int64](3),
			logs: []string{`"epoch"=3 "previousEpoch"=70000`},
		},
		"a typo the agent started at, refused for its step, is lowered without a restart": {
			fence: &fencegatev1alpha1.Fence{Spec: fencegatev1alpha1.FenceSpec{Epoch: ptr.To[int64](3)}}, floor: 1,
			state: &typo, handed: 70000, setEpochs: []uint64{3}, spec: ptr.To[int64](3),
			logs: []string{`"epoch"=3 "previousEpoch"=70000`},
		},
		"a typo with no answer yet is not lowered yet, and said once": {
			fence: &fencegatev1alpha1.Fence{Spec: fencegatev1alpha1.FenceSpec{Epoch: ptr.To[int64](3)}}, floor: 1,
			state:  &fencestate.State{Status: fencestate.Unknown, Cluster: fencestate.Cluster{Name: "east", Epoch: 70000}},
			handed: 70000, spec: ptr.To[int64](3),
			logs: []string{"is below epoch 70000 that this cluster declares"},
		},
		"a Fence made again leaves out an epoch refused for its step": {
			floor: 1, state: &typo, handed: 70000, setEpochs: []uint64{1},
			logs: []string{`"epoch"=1 "previousEpoch"=70000`},
		},
		"an epoch below the one declared is not handed over, and said once": {
			fence: &fencegatev1alpha1.Fence{}, floor: 1,
			state:  &fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Name: "east", Epoch: 7}},
			handed: 7,
			logs:   []string{"is below epoch 7 that this cluster declares"},
		},
		"a Fence made again starts at the epoch the agent declares": {
			floor: 1, state: &fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Name: "east", Epoch: 7}}, handed: 7,
			spec: ptr.To[int64](7),
		},
		"a Fence made again at --epoch leaves spec.epoch unset": {
			floor: 4, state: &fencestate.State{Status: fencestate.Fenced, Cluster: fencestate.Cluster{Name: "east", Epoch: 4}}, handed: 4,
		},
		"a Fence made again before any state leaves spec.epoch unset": {floor: 4, setEpochs: []uint64{4}},
	}
	n := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n++
			domain := fmt.Sprintf("domain-%d", n)
			if tc.fence != nil {
				f := tc.fence.DeepCopy()
				f.Name = domain
				status := f.Status
				if err := cp.Client.Create(ctx, f); err != nil {
					t.Fatal(err)
				}
				f.Status = status
				if err := cp.Client.Status().Update(ctx, f); err != nil {
					t.Fatal(err)
				}
			}
			agent := &recordingAgent{declared: tc.handed}
			switch {
			case tc.state != nil && tc.state.Reason == rpctypes.ReasonEpochStepTooLarge:
				// Like the fence agent after its first epoch was refused
				// for its step, it takes any: nothing was recorded.
				agent.declared = 0
			case tc.state != nil:
				agent.declared = tc.state.Cluster.Epoch
			}
			var (
				mu   sync.Mutex
				logs []string
			)
			m, err := newMetrics(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			k := &Keeper{metrics: m, opts: Options{
				Client: cp.Client, Domain: domain, Namespace: "default", Instance: "east-a", FloorEpoch: tc.floor,
				Fence: stateSource{tc.state},
				Agent: agent, Clock: clock.RealClock{},
				Logger: funcr.New(func(_, args string) {
					mu.Lock()
					defer mu.Unlock()
					logs = append(logs, args)
				}, funcr.Options{}),
			}}
			e := &epochSync{k: k, epoch: tc.handed, failing: map[string]bool{}}
			for range 3 {
				e.sync(ctx)
			}

			if !slices.Equal(agent.setEpochs, tc.setEpochs) {
				t.Errorf("SetEpoch %v, want %v", agent.setEpochs, tc.setEpochs)
			}
			if agent.adopted != tc.adopted {
				t.Errorf("adopted generation %d, want %d", agent.adopted, tc.adopted)
			}
			var f fencegatev1alpha1.Fence
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: domain}, &f); err != nil {
				t.Fatalf("the Fence after the syncs: %v (not found: %t)", err, apierrors.IsNotFound(err))
			}
			if !ptrEqual(f.Spec.Epoch, tc.spec) {
				t.Errorf("spec.epoch %v, want %v", ptr.Deref(f.Spec.Epoch, 0), ptr.Deref(tc.spec, 0))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(logs) != len(tc.logs) {
				t.Fatalf("%d log lines, want %d:\n%s", len(logs), len(tc.logs), strings.Join(logs, "\n"))
			}
			for _, part := range tc.logs {
				if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, part) }) {
					t.Errorf("no log line says %q:\n%s", part, strings.Join(logs, "\n"))
				}
			}
		})
	}
}

// TestRecreatedSpec: a Fence made again asks for the epoch the agent
// declares when that is above --epoch; otherwise it leaves spec.epoch unset,
// as fencegate run makes it.
func TestRecreatedSpec(t *testing.T) {
	at := func(epoch uint64) fencestate.State {
		return fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Epoch: epoch}}
	}
	tests := map[string]struct {
		floor uint64
		state fencestate.State
		ok    bool
		want  *int64
	}{
		"above --epoch":   {floor: 1, state: at(7), ok: true, want: ptr.To[int64](7)},
		"at --epoch":      {floor: 7, state: at(7), ok: true},
		"below --epoch":   {floor: 9, state: at(7), ok: true},
		"no state at all": {floor: 1, state: at(7)},
		"an epoch refused for its step, none accepted before": {
			floor: 1, ok: true,
			state: fencestate.State{Status: fencestate.Unknown, Cluster: fencestate.Cluster{Epoch: 70000}, Reason: rpctypes.ReasonEpochStepTooLarge},
		},
		"the accepted epoch while a raise is refused": {
			floor: 1, ok: true, want: ptr.To[int64](7),
			state: fencestate.State{Status: fencestate.Active, Cluster: fencestate.Cluster{Epoch: 7}, EpochRefused: &fencestate.EpochRefusal{Epoch: 70000, Reason: rpctypes.ReasonEpochStepTooLarge}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := recreatedSpec(tc.floor, tc.state, tc.ok); !ptrEqual(got.Epoch, tc.want) {
				t.Errorf("spec.epoch %v, want %v", ptr.Deref(got.Epoch, 0), ptr.Deref(tc.want, 0))
			}
		})
	}
}
