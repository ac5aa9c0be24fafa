package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/gate"
	"github.com/fencegate/fencegate/test/stack"
)

// TestGatedActuatorStopsWhenEveryFencegatePodDies: every fencegate pod of
// the holder, east, dies at once by SIGKILL: nothing releases the fence or
// withdraws the hold from the membership Leases, and nothing updates
// east's Fence, which goes on saying Holding. A gated actuator on east — a
// controller that acts on every reconcile and requeues, and a worker that
// writes outside any reconcile — stops no later than the end of validity
// that the replicas' Leases last published:
//   - no reconcile that begins at or after that end less the gate's
//     ClockSkew reaches the reconciler, and no write that begins then
//     reaches the API server: each fails with ErrFenced, FenceUnknown;
//   - whatever passed the gate has returned by that end;
//   - before the kill, the same actuator did act.
//
// The actuator writes ConfigMaps, which no webhook guards: the gate alone
// stops it, as an ungated write after the end shows. West, failed over to
// at the kill, gets the fence from the authority once east's lease ends:
// the gate closes the window in which two clusters would act.
func TestGatedActuatorStopsWhenEveryFencegatePodDies(t *testing.T) {
	const (
		// skew is the gate's ClockSkew, small and explicit: the gate
		// stops believing a hold that long before its published end.
		skew = 500 * time.Millisecond
		// every is the actuator's pace.
		every = 50 * time.Millisecond
		// outputLabel marks the ConfigMaps the actuator creates.
		outputLabel = "e2e.fencegate.dev/actuator-output"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	s := stack.StartForTest(t, ctx, stack.Options{
		Clusters:      []stack.ClusterSpec{{Name: "east", Epoch: 2, Replicas: 2}, {Name: "west", Epoch: 1}},
		LeaseTTL:      4 * time.Second,
		InstanceLease: 3 * time.Second,
		Say:           t.Logf,
	})
	east, west := s.Cluster("east"), s.Cluster("west")
	waitFenceOf(t, ctx, east, "default", "held and enforced by both replicas", 2*time.Minute, is(holdingEnforced, 0, 2))
	waitFenceOf(t, ctx, west, "default", "fenced", 2*time.Minute, is(fencedEnforced, 0, 0))
	token := east.TokenForTest(t, ctx, "default")
	output := func(name string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{outputLabel: "true"}}}
	}
	if err := east.ControlPlane.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "actuator"}}); err != nil {
		t.Fatal(err)
	}

	// The operator on east: a manager, its gate, and an actuator whose
	// every reconcile creates a ConfigMap through the gated client.
	mgr, err := ctrl.NewManager(east.ControlPlane.Config, ctrl.Options{
		Scheme: east.ControlPlane.Scheme, Logger: testr.New(t), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		// -count runs the test again in this process, with a controller
		// of the same name.
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	// A held-back reconcile is tried again soon, so that the reconciler is
	// seen not to be called.
	g, err := gate.New(mgr, gate.Options{Namespace: stack.Namespace, ClockSkew: skew, Requeue: 2 * every})
	if err != nil {
		t.Fatal(err)
	}
	writes, err := g.Client(mgr.GetClient(), &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var reconciles, direct journal
	// The attempt of each reconcile reaches the reconciler through the
	// context the gate hands it.
	type attemptKey struct{}
	actuator := g.Reconciler(&corev1.ConfigMap{}, reconcile.Func(func(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
		a := ctx.Value(attemptKey{}).(*attempt)
		a.passed, a.name = true, fmt.Sprintf("reconcile-%d", a.start.UnixNano())
		a.err = writes.Create(ctx, output(a.name))
		return reconcile.Result{RequeueAfter: every}, nil
	}))
	err = ctrl.NewControllerManagedBy(mgr).Named("gate-kill-actuator").
		For(&corev1.ConfigMap{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			// Not the ConfigMaps it creates: each would be reconciled.
			return o.GetNamespace() == "default" && o.GetName() == "actuator"
		}))).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			a := &attempt{start: time.Now()}
			res, err := actuator.Reconcile(context.WithValue(ctx, attemptKey{}, a), req)
			a.end = time.Now()
			reconciles.add(*a)
			return res, err
		}))
	if err != nil {
		t.Fatal(err)
	}
	mgrCtx, stopManager := context.WithCancel(ctx)
	mgrDone := make(chan error, 1)
	go func() { mgrDone <- mgr.Start(mgrCtx) }()
	stopWriter, writerDone := make(chan struct{}), make(chan struct{})
	// stop ends the actuator: the writer first, whose last write runs to
	// its end under a live context as the others did, then the manager.
	stop := sync.OnceFunc(func() {
		close(stopWriter)
		<-writerDone
		stopManager()
		if err := <-mgrDone; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	defer stop()
	// The writer acts outside any reconcile: each write is gated on the
	// hold at the moment it is made.
	go func() {
		defer close(writerDone)
		for {
			a := attempt{start: time.Now()}
			a.name = fmt.Sprintf("direct-%d", a.start.UnixNano())
			a.err = writes.Create(ctx, output(a.name))
			a.end = time.Now()
			a.passed = a.err == nil
			direct.add(a)
			select {
			case <-stopWriter:
				return
			case <-time.After(every):
			}
		}
	}()
	if err := wait.PollUntilContextTimeout(ctx, every, time.Minute, true, func(ctx context.Context) (bool, error) {
		return g.Hold(ctx, "default").Holding, nil
	}); err != nil {
		t.Fatalf("the gate on east never saw the hold; last %+v", g.Hold(ctx, "default"))
	}
	// Every end of validity the Leases publish for the token, from a
	// watch of them like the gate's.
	ends := &holdEnds{token: token}
	leases, err := mgr.GetCache().GetInformer(ctx, &coordinationv1.Lease{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leases.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: ends.see, UpdateFunc: func(_, o any) { ends.see(o) }}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, every, time.Minute, true, func(context.Context) (bool, error) {
		return reconciles.succeeded() >= 5 && direct.succeeded() >= 5, nil
	}); err != nil {
		t.Fatalf("the actuator never acted before the kill: %d reconciles and %d writes succeeded", reconciles.succeeded(), direct.succeeded())
	}
	before := g.Hold(ctx, "default")

	// SIGKILL: no graceful release, no withdrawal of the hold.
	kill := time.Now()
	for _, r := range east.Replicas {
		r.Run.Kill()
	}
	killed := time.Now()
	// The failover begins at once, so that west takes the fence as soon
	// as the authority may give it.
	type result struct {
		out string
		err error
	}
	failedOver := make(chan result, 1)
	go func() {
		out, stderr, exit, err := s.Failover(ctx, "--to", "west", "--wait", "--timeout", "2m")
		if err == nil && exit != 0 {
			err = fmt.Errorf("exit %d: %s", exit, stderr)
		}
		failedOver <- result{out, err}
	}()
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return !g.Hold(ctx, "default").Holding, nil
	}); err != nil {
		t.Fatalf("the gate on east still sees the hold a minute after every fencegate died: %+v", g.Hold(ctx, "default"))
	}
	unknown := time.Now()
	fo := <-failedOver
	if fo.err != nil {
		t.Fatalf("failover to west: %v\n%s", fo.err, fo.out)
	}
	westHolds := time.Now()
	t.Logf("failover to west:\n%s", fo.out)

	// Nobody updates east's Fence: it says Holding, with the old token,
	// while west holds the fence and east's gate refuses.
	if f := fence(t, ctx, east); conditions(f) != holdingEnforced || f.Status.Token != token {
		t.Errorf("east's Fence after every fencegate died: %s; want it to still say %s with token %d", statusYAML(f), holdingEnforced, token)
	}
	if h := g.Hold(ctx, "default"); h.Holding || h.Reason != fencegatev1alpha1.ReasonFenceUnknown {
		t.Errorf("east's gate after the failover: %+v; want no hold, %s", h, fencegatev1alpha1.ReasonFenceUnknown)
	}
	// The API server takes the actuator's writes: only the gate stops them.
	if err := east.ControlPlane.Client.Create(ctx, output("ungated")); err != nil {
		t.Errorf("an ungated write on east after the kill: %v", err)
	}
	stop()

	lastEnd, versions := ends.latest()
	if lastEnd.IsZero() {
		t.Fatalf("no membership Lease of east published a hold of token %d", token)
	}
	var stillHeld coordinationv1.LeaseList
	if err := east.ControlPlane.Client.List(ctx, &stillHeld, client.InNamespace(stack.Namespace), client.MatchingLabels{membership.LabelDomain: "default"}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(stillHeld.Items, func(l coordinationv1.Lease) bool { h, ok := membership.HoldOf(&l); return ok && h.Token == token }) {
		t.Errorf("no Lease of east still publishes the hold of token %d: SIGKILL withdraws nothing", token)
	}
	var outputs corev1.ConfigMapList
	if err := east.ControlPlane.Client.List(ctx, &outputs, client.InNamespace("default"), client.HasLabels{outputLabel}); err != nil {
		t.Fatal(err)
	}
	stored := map[string]bool{}
	for _, o := range outputs.Items {
		stored[o.Name] = true
	}
	// The gate believes a hold until the latest end it read, less
	// ClockSkew, and reads no end later than the latest published: an
	// attempt that begins at that bound is decided after it, exactly.
	bound := lastEnd.Add(-skew)
	rel := func(at time.Time) string { return fmt.Sprintf("%+.3fs", at.Sub(kill).Seconds()) }
	t.Logf("timeline from the kill at %s: east's gate, just before, held until %s; every fencegate of east dead %s; "+
		"last lease end published %s (in %d Lease versions with token %d), the gate's end (ClockSkew %s) %s; "+
		"the gate said %s at %s; west held the fence at %s",
		kill.Format(time.RFC3339Nano), rel(before.Until), rel(killed), rel(lastEnd), versions, token, skew, rel(bound),
		fencegatev1alpha1.ReasonFenceUnknown, rel(unknown), rel(westHolds))
	if !lastEnd.After(kill) || !westHolds.After(lastEnd) {
		t.Errorf("the last lease end %s is not between the kill and west's hold %s", rel(lastEnd), rel(westHolds))
	}

	for _, j := range []struct {
		what     string
		attempts []attempt
		// refusal says whether a held-back attempt has the gate's error:
		// a held-back reconcile has none, it is requeued.
		refusal bool
	}{
		{"reconcile", reconciles.snapshot(), false},
		{"write outside a reconcile", direct.snapshot(), true},
	} {
		var acted, after int
		var lastThrough, firstHeld *attempt
		for i := range j.attempts {
			a := &j.attempts[i]
			// A write cancelled in flight may have landed all the same.
			through := a.passed || stored[a.name]
			switch {
			case through && !a.start.Before(bound):
				t.Errorf("%s: began at %s, not before the gate's end %s, and passed the gate (err %v)", j.what, rel(a.start), rel(bound), a.err)
			case through && a.end.After(lastEnd):
				t.Errorf("%s: passed the gate and returned at %s, after the last lease end %s (err %v)", j.what, rel(a.end), rel(lastEnd), a.err)
			case j.refusal && !through && !a.start.Before(bound) && !fencedUnknown(a.err):
				t.Errorf("%s: began at %s, after the gate's end %s, and failed with %v; want ErrFenced, %s", j.what, rel(a.start), rel(bound), a.err, fencegatev1alpha1.ReasonFenceUnknown)
			}
			if through && a.err == nil && a.end.Before(kill) {
				acted++
			}
			if a.start.After(lastEnd) {
				after++
			}
			if through {
				lastThrough = a
			}
			if !through && a.start.After(kill) && firstHeld == nil {
				firstHeld = a
			}
		}
		if acted == 0 || after == 0 || lastThrough == nil || firstHeld == nil {
			t.Errorf("%s: %d acted before the kill, %d began after the last lease end, last through the gate %v, first held back after the kill %v: "+
				"the test proves nothing", j.what, acted, after, lastThrough, firstHeld)
			continue
		}
		t.Logf("%s: %d attempts, %d acted before the kill; the last through the gate began %s and returned %s (%s); "+
			"the first held back after the kill began %s (%s); %d began after the last lease end, all held back",
			j.what, len(j.attempts), acted, rel(lastThrough.start), rel(lastThrough.end), lastThrough.outcome(), rel(firstHeld.start), firstHeld.outcome(), after)
	}
}

// fencedUnknown says whether err is the gate's refusal for want of a live
// hold.
func fencedUnknown(err error) bool {
	var fenced *gate.FencedError
	return errors.As(err, &fenced) && fenced.Hold.Reason == fencegatev1alpha1.ReasonFenceUnknown
}

// attempt is one try of a gated actuator to act: a reconcile, or a write
// outside any.
type attempt struct {
	start, end time.Time
	// passed says whether the gate called the reconciler or, for a write,
	// whether the API server took it.
	passed bool
	// name is the ConfigMap the attempt creates; empty for a reconcile
	// the gate held back.
	name string
	// err is the create's.
	err error
}

// outcome says how the attempt ended.
func (a *attempt) outcome() string {
	switch {
	case a.err != nil:
		return a.err.Error()
	case a.passed:
		return "acted"
	default:
		return "held back by the gate, requeued"
	}
}

// journal collects attempts from several goroutines.
type journal struct {
	mu       sync.Mutex
	attempts []attempt
}

func (j *journal) add(a attempt) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.attempts = append(j.attempts, a)
}

func (j *journal) snapshot() []attempt {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.attempts)
}

// succeeded counts the attempts that acted.
func (j *journal) succeeded() int {
	n := 0
	for _, a := range j.snapshot() {
		if a.passed && a.err == nil {
			n++
		}
	}
	return n
}

// holdEnds follows the ends of validity that the membership Leases of the
// default domain publish for one token, in every version of them a watch
// sees.
type holdEnds struct {
	token    int64
	mu       sync.Mutex
	last     time.Time
	versions int
}

func (h *holdEnds) see(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Namespace != stack.Namespace || l.Labels[membership.LabelDomain] != "default" {
		return
	}
	hold, ok := membership.HoldOf(l)
	if !ok || hold.Token != h.token {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.versions++
	if hold.ValidUntil.After(h.last) {
		h.last = hold.ValidUntil
	}
}

// latest is the latest end published, and in how many Lease versions
// that carry the token.
func (h *holdEnds) latest() (time.Time, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last, h.versions
}
