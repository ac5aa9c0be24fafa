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
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/cluster"
)

// noPending is an authority that knows of no pending takeover.
type noPending struct{ fencev1.FenceServiceClient }

func (noPending) GetFence(context.Context, *fencev1.GetFenceRequest, ...grpc.CallOption) (*fencev1.GetFenceResponse, error) {
	return &fencev1.GetFenceResponse{}, nil
}

type fixedPolicy struct{}

func (fixedPolicy) Reconcile(context.Context, string, map[string]any) (engine.ReconcileDecision, error) {
	return engine.ReconcileDecision{Message: "the policies' words"}, nil
}

type noMarks struct{}

func (noMarks) Progress() controller.MarkProgress { return controller.MarkProgress{} }
func (noMarks) Changes() <-chan struct{}          { return nil }

// stateSource is a fence state that never changes: nil for none yet.
type stateSource struct{ state *fencestate.State }

func (s stateSource) Fence() (fencestate.State, bool) {
	if s.state == nil {
		return fencestate.State{}, false
	}
	return *s.state, true
}

func (stateSource) Subscribe() <-chan struct{} { return nil }

// testInstance is the Instance of k, its Lease not made yet.
func testInstance(k *Keeper) *instance {
	return &instance{k: k, failing: map[string]bool{}}
}

// testKeeper is the Keeper of instance in domain, whose fence state is
// *state, on clk, started with --epoch 3.
func testKeeper(t *testing.T, c client.Client, domain, instance string, clk clock.WithTicker, state *fencestate.State, agent Agent) *Keeper {
	t.Helper()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	k := &Keeper{metrics: m, opts: Options{
		Client: c, Domain: domain, Namespace: "default", Instance: instance, FloorEpoch: 3,
		Fence: stateSource{state},
		Agent: agent, Authority: noPending{}, Policy: fixedPolicy{}, Marks: noMarks{},
		LeaseDuration: membership.DefaultDuration, Clock: clk, Logger: logr.Discard(),
	}}
	k.member = &memberLease{lease: membership.NewLease(k.membership())}
	return k
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
				i := testInstance(testKeeper(t, cp.Client, domain, name, clk, &p.state, &recordingAgent{declared: 3}))
				i.renewLease(ctx)
				i.sync(ctx)
			}
			agent := &recordingAgent{declared: 3}
			k := testKeeper(t, cp.Client, domain, "east-a", clock.RealClock{}, &tc.leader, agent)
			leader := testInstance(k)
			leader.renewLease(ctx)
			leader.sync(ctx)
			epochs := &epochSync{k: k, epoch: 3, failing: map[string]bool{}}
			epochs.sync(ctx)
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
			epochs.sync(ctx)
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
		i := testInstance(testKeeper(t, cp.Client, domain, "east-a", clk, &state, &recordingAgent{declared: 3}))
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

// TestStatusTakesOverFromTheFormerFieldManager: on a real API server, a
// Fence whose status the leader applied under the Component controller's
// field manager (before each writer had its own) keeps every field the
// leader still sends, and loses the one it no longer does (a pending
// takeover that ended), once the leader applies as its own manager.
func TestStatusTakesOverFromTheFormerFieldManager(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "field-managers"})
	const domain = "upgraded"
	if err := cp.Client.Create(ctx, &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: domain}}); err != nil {
		t.Fatal(err)
	}
	state := fencestate.State{
		Status: fencestate.Fenced, Cluster: fencestate.Cluster{Name: "east", UID: "uid-east", Epoch: 3},
		Holder: fencestate.Cluster{Name: "west", Epoch: 4}, Reason: rpctypes.ReasonClusterFenced, LastSuccessNS: time.Now().UnixNano(),
	}
	k := testKeeper(t, cp.Client, domain, "east-a", clock.RealClock{}, &state, &recordingAgent{declared: 3})
	i := testInstance(k)
	i.renewLease(ctx)
	i.sync(ctx)
	// What the former leader wrote: the same fields, and a takeover that
	// was pending then.
	old := &statusWriter{k: k, failing: map[string]bool{}}
	old.sync(ctx)
	var f fencegatev1alpha1.Fence
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: domain}, &f); err != nil {
		t.Fatal(err)
	}
	former := f.Status
	former.Instances = nil
	former.Pending = &fencegatev1alpha1.FenceCluster{Name: "north", Epoch: 9}
	if err := ssaApply(ctx, cp.Client, domain, former, formerStatusFieldManager); err != nil {
		t.Fatal(err)
	}
	// As on a Fence written before the leader had a manager of its own.
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: domain}, &f); err != nil {
		t.Fatal(err)
	}
	releaseOwn(t, ctx, cp.Client, &f)

	leader := &statusWriter{k: k, failing: map[string]bool{}}
	for range 3 {
		leader.sync(ctx)
	}
	if len(leader.failing) > 0 {
		t.Fatalf("the status writer failed: %v", leader.failing)
	}
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: domain}, &f); err != nil {
		t.Fatal(err)
	}
	if f.Status.Pending != nil {
		t.Errorf("pending %+v: the field only the former manager owned must be gone", f.Status.Pending)
	}
	if f.Status.State != "fenced" || f.Status.Holder == nil || f.Status.Holder.Name != "west" || len(f.Status.Instances) != 1 {
		t.Errorf("status %+v: the fields the leader sends must stay", f.Status)
	}
	if appliesStatus(&f, formerStatusFieldManager) || !appliesStatus(&f, StatusFieldManager) {
		t.Errorf("managed fields %+v: want %s's apply only", f.ManagedFields, StatusFieldManager)
	}
}

// ssaApply applies status to the Fence domain as manager.
func ssaApply(ctx context.Context, c client.Client, domain string, status fencegatev1alpha1.ClusterFenceStatus, manager string) error {
	k := &Keeper{opts: Options{Client: c, Domain: domain}}
	return k.applyStatus(ctx, &status, manager)
}

// releaseOwn makes f as a Fence written before StatusFieldManager existed:
// it drops that manager's entries from managedFields.
func releaseOwn(t *testing.T, ctx context.Context, c client.Client, f *fencegatev1alpha1.Fence) {
	t.Helper()
	var kept []metav1.ManagedFieldsEntry
	for _, e := range f.ManagedFields {
		if e.Manager != StatusFieldManager {
			kept = append(kept, e)
		}
	}
	f.ManagedFields = kept
	if err := c.Update(ctx, f); err != nil {
		t.Fatal(err)
	}
}
