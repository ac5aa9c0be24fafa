package fenceagent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	"github.com/fencegate/fencegate/fencestate"
)

// TestSetFence follows the states a cluster commits through a failover and
// checks that the holder, token and epoch series say what the state says,
// one holder series at a time.
func TestSetFence(t *testing.T) {
	east := fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 1}
	west := fencestate.Cluster{Name: "west", UID: "uid-west", Epoch: 2}
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(m.epoch, m.holder, m.token, m.lastAnswer)

	steps := []struct {
		name  string
		state fencestate.State
		want  string
	}{
		{
			name:  "no answer yet: no holder, no answer time",
			state: fencestate.State{Status: fencestate.Unknown, Cluster: east},
			want: `
fencegate_fence_epoch 1
fencegate_fence_token 0
`,
		},
		{
			name:  "east holds the fence",
			state: fencestate.State{Status: fencestate.Active, Cluster: east, Holder: east, Token: 12, LastSuccessNS: 1_800_000_000_500_000_000},
			want: `
fencegate_fence_epoch 1
fencegate_fence_last_answer_timestamp_seconds 1.8000000005e+09
fencegate_fence_holder_epoch{holder="east"} 1
fencegate_fence_token 12
`,
		},
		{
			name:  "west takes over: east's series goes",
			state: fencestate.State{Status: fencestate.Fenced, Cluster: east, Holder: west, LastSuccessNS: 1_800_000_005_000_000_000},
			want: `
fencegate_fence_epoch 1
fencegate_fence_last_answer_timestamp_seconds 1.800000005e+09
fencegate_fence_holder_epoch{holder="west"} 2
fencegate_fence_token 0
`,
		},
		{
			name:  "west raises its epoch",
			state: fencestate.State{Status: fencestate.Fenced, Cluster: east, Holder: fencestate.Cluster{Name: "west", UID: "uid-west", Epoch: 3}, LastSuccessNS: 1_800_000_010_000_000_000},
			want: `
fencegate_fence_epoch 1
fencegate_fence_holder_epoch{holder="west"} 3
fencegate_fence_last_answer_timestamp_seconds 1.80000001e+09
fencegate_fence_token 0
`,
		},
		{
			name:  "the holder is forgotten",
			state: fencestate.State{Status: fencestate.Unknown, Cluster: east, LastSuccessNS: 1_800_000_010_000_000_000},
			want: `
fencegate_fence_epoch 1
fencegate_fence_last_answer_timestamp_seconds 1.80000001e+09
fencegate_fence_token 0
`,
		},
	}
	for _, step := range steps {
		m.setFence(step.state)
		want := `
# HELP fencegate_fence_epoch The epoch this cluster declares.
# TYPE fencegate_fence_epoch gauge
# HELP fencegate_fence_holder_epoch The epoch of the cluster that holds the fence, labelled with its name, as this cluster last learned it; no series while no holder is known.
# TYPE fencegate_fence_holder_epoch gauge
# HELP fencegate_fence_last_answer_timestamp_seconds When the last declaration that the fence authority answered (a grant or a fence refusal) was sent, in Unix time; no series before the first answer.
# TYPE fencegate_fence_last_answer_timestamp_seconds gauge
# HELP fencegate_fence_token The fencing token of this cluster's grant while it holds the fence; 0 otherwise.
# TYPE fencegate_fence_token gauge
` + step.want
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
			t.Errorf("%s: %v", step.name, err)
		}
	}
}

// TestRefusedSeries: fencegate_fence_refused says which refusal that waits
// for an operator this cluster's declarations meet, also while the agent
// declares the last accepted epoch instead (and so stays active).
func TestRefusedSeries(t *testing.T) {
	east := fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 3}
	tests := map[string]struct {
		state fencestate.State
		// stepTooLarge and restored are the two series' values.
		stepTooLarge, restored int
	}{
		"active": {state: fencestate.State{Status: fencestate.Active, Cluster: east, Holder: east}},
		"fenced": {state: fencestate.State{Status: fencestate.Fenced, Cluster: east, Reason: rpctypes.ReasonClusterFenced}},
		"a first epoch refused for its step": {
			state:        fencestate.State{Status: fencestate.Unknown, Cluster: east, Reason: rpctypes.ReasonEpochStepTooLarge},
			stepTooLarge: 1,
		},
		"a raise refused for its step, the accepted epoch held": {
			state:        fencestate.State{Status: fencestate.Active, Cluster: east, Holder: east, EpochRefused: &fencestate.EpochRefusal{Epoch: 70000, Reason: rpctypes.ReasonEpochStepTooLarge}},
			stepTooLarge: 1,
		},
		"a restored copy": {
			state:    fencestate.State{Status: fencestate.Unknown, Cluster: east, Reason: rpctypes.ReasonClusterRestored},
			restored: 1,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := newMetrics(nil)
			if err != nil {
				t.Fatal(err)
			}
			m.setFence(tc.state)
			want := fmt.Sprintf(`
# HELP fencegate_fence_refused %s
# TYPE fencegate_fence_refused gauge
fencegate_fence_refused{reason="CLUSTER_RESTORED"} %d
fencegate_fence_refused{reason="EPOCH_STEP_TOO_LARGE"} %d
`, refusedHelp, tc.restored, tc.stepTooLarge)
			if err := testutil.CollectAndCompare(m.refused, strings.NewReader(want)); err != nil {
				t.Error(err)
			}
		})
	}
}
