package fenceobject

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/cluster"
)

// noPending is an authority that knows of no pending takeover.
type noPending struct{ fencev1.FenceServiceClient }

func (noPending) GetFence(context.Context, *fencev1.GetFenceRequest, ...grpc.CallOption) (*fencev1.GetFenceResponse, error) {
	return &fencev1.GetFenceResponse{}, nil
}

type fixedPolicy struct{}

func (fixedPolicy) Reconcile(context.Context, map[string]any) (engine.ReconcileDecision, error) {
	return engine.ReconcileDecision{Message: "the policies' words"}, nil
}

type noMarks struct{}

func (noMarks) Progress() controller.MarkProgress { return controller.MarkProgress{} }
func (noMarks) Changes() <-chan struct{}          { return nil }

// testKeeper is the Keeper of instance in domain, whose fence state is
// *state, on clk, started with --epoch 3.
func testKeeper(t *testing.T, c client.Client, domain, instance string, clk clock.WithTicker, state *fencestate.State, agent Agent) *Keeper {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return &Keeper{metrics: m, opts: Options{
		Client: c, Domain: domain, Namespace: "default", Instance: instance, FloorEpoch: 3,
		Fence: func() (fencestate.State, bool) { return *state, true },
		Agent: agent, Authority: noPending{}, Policy: fixedPolicy{}, Marks: noMarks{},
		LeaseDuration: DefaultLeaseDuration, Clock: clk, Logger: logr.Discard(),
	}}
}

// TestClusterGenerationThroughTheFence: on a real API server, each
// instance's entry carries the generation its agent presents, the leader
// writes the highest of the running instances' into status.clusterGeneration,
// and every instance adopts it: a leader whose own agent is refused as
// restored (cut off while the authority moved on twice) recovers from its
// peers. A restored copy, whose instances are all refused, learns nothing
// newer than it had.
func TestClusterGenerationThroughTheFence(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "generation"})
	now := time.Now()
	east := fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 3}
	at := func(s fencestate.State, g uint64) fencestate.State {
		s.Cluster, s.ClusterGeneration, s.LastSuccessNS = east, g, now.UnixNano()
		return s
	}
	fenced := fencestate.State{Status: fencestate.Fenced, Holder: fencestate.Cluster{Name: "west", Epoch: 4}, Reason: rpctypes.ReasonClusterFenced}
	restored := fencestate.State{Status: fencestate.Unknown, Reason: rpctypes.ReasonClusterRestored}

	type peer struct {
		state fencestate.State
		// ended makes its Lease one that ended an hour ago.
		ended bool
	}
	tests := map[string]struct {
		// leader is the leader's state; peers the other instances'.
		leader fencestate.State
		peers  map[string]peer
		// want is status.clusterGeneration, and what the leader's
		// agent adopts.
		want uint64
	}{
		"a leader refused as restored adopts the generation its peers present": {
			leader: at(restored, 4),
			peers:  map[string]peer{"east-b": {state: at(fenced, 8)}, "east-c": {state: at(fenced, 6)}},
			want:   8,
		},
		"a peer whose Lease ended does not count": {
			leader: at(restored, 4),
			peers:  map[string]peer{"east-b": {state: at(fenced, 6)}, "east-gone": {state: at(fenced, 9), ended: true}},
			want:   6,
		},
		"a restored copy, every instance refused, learns nothing newer": {
			leader: at(restored, 4),
			peers:  map[string]peer{"east-b": {state: at(restored, 3)}},
			want:   4,
		},
		"a leader ahead of its peers keeps its own": {
			leader: at(fenced, 8),
			peers:  map[string]peer{"east-b": {state: at(restored, 4)}},
			want:   8,
		},
	}
	n := 0
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			n++
			domain := fmt.Sprintf("generation-%d", n)
			if err := cp.Client.Create(ctx, &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: domain}}); err != nil {
				t.Fatal(err)
			}
			for name, p := range tc.peers {
				clk := clocktesting.NewFakeClock(now)
				if p.ended {
					clk.SetTime(now.Add(-time.Hour))
				}
				i := &instance{k: testKeeper(t, cp.Client, domain, name, clk, &p.state, &recordingAgent{declared: 3}), epoch: 3, failing: map[string]bool{}}
				i.renewLease(ctx)
				i.sync(ctx)
			}
			agent := &recordingAgent{declared: 3}
			k := testKeeper(t, cp.Client, domain, "east-a", clock.RealClock{}, &tc.leader, agent)
			leader := &instance{k: k, epoch: 3, failing: map[string]bool{}}
			leader.renewLease(ctx)
			leader.sync(ctx)
			if agent.adopted != 0 {
				t.Fatalf("adopted generation %d before the leader wrote any", agent.adopted)
			}

			status := &statusWriter{k: k, failing: map[string]bool{}}
			status.sync(ctx)
			if len(status.failing) > 0 {
				t.Fatalf("the status writer failed: %v", status.failing)
			}
			var f fencegatev1alpha1.Fence
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: domain}, &f); err != nil {
				t.Fatal(err)
			}
			if got := uint64(f.Status.ClusterGeneration); got != tc.want {
				t.Errorf("status.clusterGeneration %d, want %d; entries %+v", got, tc.want, f.Status.Instances)
			}
			leader.sync(ctx)
			if agent.adopted != tc.want {
				t.Errorf("the leader's agent adopted generation %d, want %d", agent.adopted, tc.want)
			}
		})
	}

	// An entry is applied again when only its generation changes, so that
	// the leader sees it; a heartbeat that changes nothing writes nothing.
	t.Run("the entry follows the generation, not the heartbeats", func(t *testing.T) {
		domain := "generation-entry"
		if err := cp.Client.Create(ctx, &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: domain}}); err != nil {
			t.Fatal(err)
		}
		clk := clocktesting.NewFakeClock(now)
		state := at(fenced, 5)
		i := &instance{k: testKeeper(t, cp.Client, domain, "east-a", clk, &state, &recordingAgent{declared: 3}), epoch: 3, failing: map[string]bool{}}
		entry := func() (fencegatev1alpha1.FenceInstance, string) {
			t.Helper()
			var f fencegatev1alpha1.Fence
			if err := cp.Client.Get(ctx, client.ObjectKey{Name: domain}, &f); err != nil {
				t.Fatal(err)
			}
			if len(f.Status.Instances) != 1 {
				t.Fatalf("entries %+v, want east-a's", f.Status.Instances)
			}
			return f.Status.Instances[0], f.ResourceVersion
		}
		i.sync(ctx)
		first, version := entry()
		if first.ClusterGeneration != 5 {
			t.Fatalf("entry %+v, want generation 5", first)
		}

		clk.Step(5 * time.Second)
		state.LastSuccessNS = clk.Now().UnixNano()
		i.sync(ctx)
		if _, v := entry(); v != version {
			t.Errorf("a heartbeat wrote the Fence (resourceVersion %s, then %s)", version, v)
		}

		clk.Step(5 * time.Second)
		state.ClusterGeneration = 6
		i.sync(ctx)
		got, _ := entry()
		if got.ClusterGeneration != 6 || !got.Since.Equal(first.Since) {
			t.Errorf("entry %+v after the generation moved to 6, want generation 6 and since %v kept: the state it applies did not change", got, first.Since)
		}
	})
}
