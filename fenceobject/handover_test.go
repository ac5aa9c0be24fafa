package fenceobject

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/test/cluster"
)

// fencedBy is this cluster's state once told that west took over at epoch.
func fencedBy(epoch uint64) fencestate.State {
	return fencestate.State{Status: fencestate.Fenced, Holder: fencestate.Cluster{Name: "west", Epoch: epoch}}
}

// fenceWith is a Fence whose status is state, naming holder at epoch, with
// a Quiesced condition of status and reason.
func fenceWith(state, holder string, epoch int64, status metav1.ConditionStatus, reason string) *fencegatev1alpha1.Fence {
	f := &fencegatev1alpha1.Fence{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	f.Status.State = state
	if holder != "" {
		f.Status.Holder = &fencegatev1alpha1.FenceCluster{Name: holder, Epoch: epoch}
	}
	if reason != "" {
		f.Status.Conditions = []metav1.Condition{{Type: fencegatev1alpha1.ConditionQuiesced, Status: status, Reason: reason, Message: reason}}
	}
	return f
}

func TestHandoverStanding(t *testing.T) {
	tests := map[string]struct {
		fence               *fencegatev1alpha1.Fence
		wantHeld, wantQuiet bool
	}{
		"the leader still active":                 {fence: fenceWith("active", "east", 7, metav1.ConditionFalse, fencegatev1alpha1.ReasonFenceHeld)},
		"no status yet":                           {fence: fenceWith("", "", 0, "", "")},
		"fenced by an older holder epoch":         {fence: fenceWith("fenced", "west", 7, metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced)},
		"fenced by another cluster":               {fence: fenceWith("fenced", "north", 8, metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced)},
		"holds being decided":                     {fence: fenceWith("fenced", "west", 8, metav1.ConditionFalse, fencegatev1alpha1.ReasonHoldsPending)},
		"held, not quiet":                         {fence: fenceWith("fenced", "west", 8, metav1.ConditionFalse, fencegatev1alpha1.ReasonNotQuiet), wantHeld: true},
		"held and quiet":                          {fence: fenceWith("fenced", "west", 8, metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced), wantHeld: true, wantQuiet: true},
		"unknown holds too (the leader cut off)":  {fence: fenceWith("unknown", "west", 8, metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced), wantHeld: true, wantQuiet: true},
		"no held kinds: nothing to wait for":      {fence: fenceWith("fenced", "west", 8, metav1.ConditionUnknown, fencegatev1alpha1.ReasonNoHeldKinds), wantHeld: true, wantQuiet: true},
		"a later epoch of the same holder counts": {fence: fenceWith("fenced", "west", 9, metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced), wantHeld: true, wantQuiet: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			held, quiet, why := handoverStanding(tc.fence, fencedBy(8))
			if held != tc.wantHeld || quiet != tc.wantQuiet || why == "" {
				t.Errorf("held %t, quiet %t (%q), want %t, %t and a reason", held, quiet, why, tc.wantHeld, tc.wantQuiet)
			}
		})
	}
}

// TestAwaitHandover: AwaitHandover returns as soon as the Fence says every
// held object is quiet, after the quiet wait once they are all held, and
// with ctx's error, saying where the holds stand, when ctx ends first.
func TestAwaitHandover(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := fencegatev1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	tests := map[string]struct {
		fence   *fencegatev1alpha1.Fence
		wantErr bool
		minWait time.Duration
	}{
		"quiet: at once":                    {fence: fenceWith("fenced", "west", 8, metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced)},
		"held, not quiet: after the wait":   {fence: fenceWith("fenced", "west", 8, metav1.ConditionFalse, fencegatev1alpha1.ReasonNotQuiet), minWait: 200 * time.Millisecond},
		"pending: never, ctx ends":          {fence: fenceWith("fenced", "west", 8, metav1.ConditionFalse, fencegatev1alpha1.ReasonHoldsPending), wantErr: true},
		"the leader still active: ctx ends": {fence: fenceWith("active", "east", 7, metav1.ConditionFalse, fencegatev1alpha1.ReasonFenceHeld), wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(tc.fence).Build()
			k := &Keeper{opts: Options{Client: c, Domain: "default", Clock: clock.RealClock{}, HandoverQuietWait: 200 * time.Millisecond, Logger: logr.Discard()}}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			start := time.Now()
			err := k.AwaitHandover(ctx, fencedBy(8))
			took := time.Since(start)
			switch {
			case tc.wantErr && !errors.Is(err, context.DeadlineExceeded):
				t.Errorf("AwaitHandover = %v, want the deadline", err)
			case !tc.wantErr && err != nil:
				t.Errorf("AwaitHandover = %v", err)
			case took < tc.minWait:
				t.Errorf("returned after %s, want at least %s", took, tc.minWait)
			}
		})
	}
}

// TestWithdrawAfterALostWrite: a hold whose write failed although the API
// server took it (an answer lost) is withdrawn by a write: the Lease does
// not go on publishing it after the agent released.
func TestWithdrawAfterALostWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "fenceobject-lost-write"})
	lossy := &lossyClient{Client: cp.Client}
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	state := fencestate.State{Status: fencestate.Fenced}
	k := testKeeper(t, lossy, "payments", "a", clk, &state, &recordingAgent{})
	i := testInstance(k)
	if _, err := k.member.renew(ctx); err != nil { // makes the Lease, with no hold
		t.Fatal(err)
	}
	state = fencestate.State{Status: fencestate.Active, Token: 42, ValidUntilNS: clk.Now().Add(9 * time.Second).UnixNano()}
	lossy.loseAnswer = true
	i.publishHold(ctx) // the API server takes the hold; the answer is lost
	lossy.loseAnswer = false
	if err := k.WithdrawHold(ctx); err != nil {
		t.Fatal(err)
	}
	var l coordinationv1.Lease
	if err := cp.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "fencegate-payments-a"}, &l); err != nil {
		t.Fatal(err)
	}
	if h, ok := membership.HoldOf(&l); ok {
		t.Errorf("the Lease still publishes %+v after the withdrawal", h)
	}
}

// lossyClient loses the answers of updates the API server took while
// loseAnswer is set.
type lossyClient struct {
	client.Client
	loseAnswer bool
}

func (c *lossyClient) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	err := c.Client.Update(ctx, obj, opts...)
	if err == nil && c.loseAnswer {
		return errors.New("the answer was lost")
	}
	return err
}
