package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/gate"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/stack"
	"github.com/fencegate/fencegate/test/testrun"
)

const (
	// actuatorUser is who the actuator acts as: the audit log counts its
	// writes.
	actuatorUser = "system:serviceaccount:apps:helm-actuator"
	// mirrorGroup is exempt from the fence: the disaster-recovery runbook
	// that copies desired state to the standby.
	mirrorGroup = "fencegate:mirror"
	// installWithin is how soon after its cluster holds the fence the
	// actuator must have installed.
	installWithin = time.Second
)

// TestMain sets controller-runtime's global logger, which the API server's
// warnings reach (a change admitted as exempt from the fence): each
// manager of the tests logs to its own test instead.
func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

// TestHelmActuatorColdStandby: the reference actuator on two real control
// planes served by real fencegate processes, installing a chart from an
// in-process chart repository.
//   - While a cluster is fenced, its actuator makes no write at all, as its
//     cluster's API server's audit log counts them by its user: no
//     install, no upgrade, whatever changes its Components receive.
//   - After `fencegate failover`, the new holder's actuator installs within
//     a second; after the failback, the old one upgrades to what changed.
//   - After the failback, a write that asserts the token of the first hold
//     is refused (STALE_FENCING_TOKEN) and a kubectl edit is admitted.
//   - A Component deleted on the fenced cluster loses that cluster's copy of
//     its release only, without the hooks that could act beyond it; the
//     holder's release stays.
func TestHelmActuatorColdStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	s := stack.StartForTest(t, ctx, stack.Options{
		Clusters: []stack.ClusterSpec{{Name: "east", Epoch: 2}, {Name: "west", Epoch: 1}},
		// A hold the replicas publish stays ahead of the gate's second of
		// clock skew between two publications (docs/design.md, "The
		// gate"), and a handover still takes a few seconds.
		LeaseTTL:      10 * time.Second,
		InstanceLease: 3 * time.Second,
		ExemptGroups:  []string{mirrorGroup},
		AuditLog:      true,
		Say:           t.Logf,
	})
	east, west := s.Cluster("east"), s.Cluster("west")
	repo := serveCharts(t, demoChart("0.1.0"))
	sites := map[*stack.Cluster]*site{}
	for _, c := range []*stack.Cluster{east, west} {
		awaitHolding(t, ctx, c, c == east)
		sites[c] = startSite(t, ctx, c)
	}
	e, w := sites[east], sites[west]
	firstToken := east.TokenForTest(t, ctx, "default")

	// East holds: its actuator installs. The mirror copies the Component
	// to west, where it is admitted, marked, and not installed.
	start := time.Now()
	if err := east.ControlPlane.Client.Create(ctx, shop(repo, "hello")); err != nil {
		t.Fatal(err)
	}
	e.awaitRelease(t, ctx, 1, "hello")
	if err := w.mirror.Create(ctx, shop(repo, "hello")); err != nil {
		t.Fatalf("west: the mirror's copy of the Component: %v", err)
	}
	w.awaitHeldBack(t, ctx)
	e.awaitAccess(t, ctx)

	// Failover: west installs within a second of holding the fence; east
	// is fenced, and its Component's change by the mirror is not acted on.
	failoverStart := time.Now()
	w.expectNoWrites(t, start, failoverStart, "fenced before the failover")
	failover(t, ctx, s, "west", "east")
	held := awaitHolding(t, ctx, west, true)
	installed := w.awaitRelease(t, ctx, 1, "hello")
	t.Logf("west: held the fence at %s, installed %v later", held.Format(time.StampMicro), installed.Sub(held))
	for _, e := range w.writes(t, held.Add(-time.Second), installed) {
		t.Logf("west: %v after: %s %s %s", e.RequestReceived.Sub(held), e.Verb, e.ObjectRef.Resource, e.ObjectRef.Name)
	}
	if installed.Sub(held) > installWithin {
		t.Errorf("west installed %v after it held the fence, want within %v", installed.Sub(held), installWithin)
	}
	eastFenced := time.Now()
	awaitHolding(t, ctx, east, false)
	if err := e.mirror.Patch(ctx, shop(repo, "hola"), client.Merge); err != nil {
		t.Fatalf("east: the mirror's change of the Component: %v", err)
	}
	if err := west.ControlPlane.Client.Patch(ctx, shop(repo, "hola"), client.Merge); err != nil {
		t.Fatal(err)
	}
	w.awaitRelease(t, ctx, 2, "hola")
	e.awaitHeldBack(t, ctx)
	time.Sleep(2 * time.Second) // reconciles that would upgrade, had the gate let them
	e.expectRelease(t, ctx, 1, "hello")

	// Failback: east upgrades to what changed while it was fenced.
	failbackStart := time.Now()
	e.expectNoWrites(t, eastFenced, failbackStart, "fenced after the failover")
	failover(t, ctx, s, "east", "west")
	held = awaitHolding(t, ctx, east, true)
	upgraded := e.awaitRelease(t, ctx, 2, "hola")
	t.Logf("east: held the fence again at %s, upgraded %v later", held.Format(time.StampMicro), upgraded.Sub(held))
	westFenced := time.Now()
	awaitHolding(t, ctx, west, false)

	// The late commit of a write decided under east's first hold is
	// refused; a person's edit of the same object is admitted.
	current := east.TokenForTest(t, ctx, "default")
	stale := shop(repo, "hello")
	stale.Annotations = map[string]string{gate.WriteTokenAnnotation: strconv.FormatInt(firstToken, 10)}
	if err := east.ControlPlane.Client.Patch(ctx, stale, client.Merge); !gate.IsStaleToken(err) {
		t.Errorf("east: a write asserting token %d after the failback (token %d): %v, want %s", firstToken, current, err, gate.StaleTokenReason)
	} else {
		t.Logf("east: a write asserting token %d: %v", firstToken, err)
	}
	edit := exec.CommandContext(ctx, filepath.Join(east.ControlPlane.Assets, "kubectl"), "--kubeconfig", east.ControlPlane.Kubeconfig,
		"edit", "components.components.fencegate.dev", "shop", "-n", "default")
	edit.Env = append(os.Environ(), `KUBE_EDITOR=sed -i -e s/hola/bonjour/`)
	if out, err := edit.CombinedOutput(); err != nil {
		t.Errorf("east: kubectl edit after the failback: %v\n%s", err, out)
	}
	e.awaitRelease(t, ctx, 3, "bonjour")

	// West is fenced again: the Component deleted there takes west's copy
	// of the release with it, without its pre-delete hook; east's stays.
	teardownStart := time.Now()
	w.expectNoWrites(t, westFenced, teardownStart, "fenced after the failback")
	if err := west.ControlPlane.Client.Delete(ctx, shop(repo, "")); err != nil {
		t.Fatal(err)
	}
	w.awaitGone(t, ctx)
	var hook corev1.ConfigMap
	if err := west.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop-goodbye"}, &hook); !apierrors.IsNotFound(err) {
		t.Errorf("west: the pre-delete hook's ConfigMap: %v; want none, the fenced cluster's teardown runs no hooks", err)
	}
	e.expectRelease(t, ctx, 3, "bonjour")
	t.Logf("the actuators' writes: east %d, west %d, none while fenced", len(e.writes(t, start, time.Now())), len(w.writes(t, start, time.Now())))
}

// actuators numbers the actuators this process starts: a controller's name
// is unique in a process, and go test -count runs the test again in it.
var actuators atomic.Int64

// site is one cluster's actuator, and a mirror that copies desired state
// to it.
type site struct {
	c *stack.Cluster
	// mirror is exempt from the fence.
	mirror client.Client
}

// startSite runs the actuator on c as actuatorUser, in this process.
func startSite(t *testing.T, ctx context.Context, c *stack.Cluster) *site {
	t.Helper()
	_, config, err := c.ControlPlane.AddUser(actuatorUser, "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(config, ctrl.Options{
		Scheme: c.ControlPlane.Scheme, Logger: testr.New(t).WithName(c.Name), Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := Setup(mgr, Options{FencegateNamespace: stack.Namespace, Concurrency: 4, Name: fmt.Sprintf("helm-actuator-%s-%d", c.Name, actuators.Add(1))}); err != nil {
		t.Fatal(err)
	}
	testrun.Start(t, ctx, "manager", mgr.Start)
	_, mirrorConfig, err := c.ControlPlane.AddUser("dr-mirror", "system:masters", mirrorGroup)
	if err != nil {
		t.Fatal(err)
	}
	return &site{c: c, mirror: newClient(t, c, mirrorConfig)}
}

func newClient(t *testing.T, c *stack.Cluster, config *rest.Config) client.Client {
	t.Helper()
	cl, err := client.New(config, client.Options{Scheme: c.ControlPlane.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// shop is the Component the test actuates, with a greeting for the chart.
func shop(repo, greeting string) *fencegatev1alpha1.Component {
	c := &fencegatev1alpha1.Component{
		TypeMeta:   metav1.TypeMeta{APIVersion: fencegatev1alpha1.GroupVersion.String(), Kind: "Component"},
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "shop"},
		Spec: fencegatev1alpha1.ComponentSpec{
			Enabled: true,
			Chart:   fencegatev1alpha1.ChartRef{Repository: repo, Name: "demo", Version: "0.1.0"},
		},
	}
	if greeting != "" {
		c.Spec.Values = &apiextensionsv1.JSON{Raw: fmt.Appendf(nil, `{"greeting":%q}`, greeting)}
	}
	return c
}

// awaitRelease waits until the release's latest revision is the one given
// and its ConfigMap says greeting; it returns when the test saw it.
func (s *site) awaitRelease(t *testing.T, ctx context.Context, revision int, greeting string) time.Time {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got = s.release(ctx)
		return got == fmt.Sprintf("revision %d deployed, greeting %q", revision, greeting), nil
	})
	if err != nil {
		t.Fatalf("%s: the release never reached revision %d with greeting %q; last: %s", s.c.Name, revision, greeting, got)
	}
	return time.Now()
}

// expectRelease fails the test unless the release is at revision with
// greeting.
func (s *site) expectRelease(t *testing.T, ctx context.Context, revision int, greeting string) {
	t.Helper()
	if got, want := s.release(ctx), fmt.Sprintf("revision %d deployed, greeting %q", revision, greeting); got != want {
		t.Errorf("%s: the release is at %s, want %s", s.c.Name, got, want)
	}
}

// release says where the shop release is: its latest revision's status,
// from Helm's release Secrets, and its ConfigMap's greeting.
func (s *site) release(ctx context.Context) string {
	var secrets corev1.SecretList
	if err := s.c.ControlPlane.Client.List(ctx, &secrets, client.InNamespace("default"), client.MatchingLabels{"owner": "helm", "name": "shop"}); err != nil {
		return err.Error()
	}
	latest, status := 0, "none"
	for _, sec := range secrets.Items {
		if v, _ := strconv.Atoi(sec.Labels["version"]); v > latest {
			latest, status = v, sec.Labels["status"]
		}
	}
	var cm corev1.ConfigMap
	if err := s.c.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, &cm); err != nil {
		return fmt.Sprintf("revision %d %s, ConfigMap: %v", latest, status, err)
	}
	return fmt.Sprintf("revision %d %s, greeting %q", latest, status, cm.Data["greeting"])
}

// awaitAccess waits until the Component publishes its Service.
func (s *site) awaitAccess(t *testing.T, ctx context.Context) {
	t.Helper()
	want := "http://shop.default.svc:8080"
	var c fencegatev1alpha1.Component
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := s.c.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, &c); err != nil {
			return false, nil
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, fencegatev1alpha1.ConditionReady)
		return len(c.Status.Access) == 1 && c.Status.Access[0].URL == want && ready != nil && ready.Reason == ReasonInstalled, nil
	})
	if err != nil {
		t.Fatalf("%s: the Component never published %s and Ready/%s; status %+v", s.c.Name, want, ReasonInstalled, c.Status)
	}
}

// awaitHeldBack waits until the Component says SourceConflict=True and no
// release exists beyond what the cluster installed while it held.
func (s *site) awaitHeldBack(t *testing.T, ctx context.Context) {
	t.Helper()
	var c fencegatev1alpha1.Component
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := s.c.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, &c); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(c.Status.Conditions, fencegatev1alpha1.ConditionSourceConflict), nil
	})
	if err != nil {
		t.Fatalf("%s: the Component never said SourceConflict=True; status %+v", s.c.Name, c.Status)
	}
}

// awaitGone waits until the Component, its release and its objects are
// gone.
func (s *site) awaitGone(t *testing.T, ctx context.Context) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := s.c.ControlPlane.Client.Get(ctx, client.ObjectKey{Namespace: "default", Name: "shop"}, &fencegatev1alpha1.Component{})
		last = s.release(ctx)
		return apierrors.IsNotFound(err) && strings.HasPrefix(last, "revision 0 none, ConfigMap: ") && strings.Contains(last, "not found"), nil
	})
	if err != nil {
		t.Fatalf("%s: the deleted Component or its release stayed: %s", s.c.Name, last)
	}
}

// writes are the actuator's writes that the cluster's API server
// answered, received between from and to.
func (s *site) writes(t *testing.T, from, to time.Time) []cluster.AuditEvent {
	t.Helper()
	events, err := s.c.ControlPlane.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var writes []cluster.AuditEvent
	for _, e := range events {
		if e.User.Username == actuatorUser && e.Mutating() && !e.RequestReceived.Before(from) && e.RequestReceived.Before(to) {
			writes = append(writes, e)
		}
	}
	return writes
}

// expectNoWrites fails the test if the actuator wrote between from and to.
func (s *site) expectNoWrites(t *testing.T, from, to time.Time, while string) {
	t.Helper()
	writes := s.writes(t, from, to)
	for _, e := range writes {
		t.Logf("%s: %s %s %s/%s at %s: %d", s.c.Name, e.Verb, e.ObjectRef.Resource, e.ObjectRef.Namespace, e.ObjectRef.Name, e.RequestReceived.Format(time.StampMicro), e.ResponseStatus.Code)
	}
	if len(writes) != 0 {
		t.Errorf("%s, %s: the actuator made %d writes from %s to %s, want none", s.c.Name, while, len(writes), from.Format(time.StampMicro), to.Format(time.StampMicro))
	}
}

// awaitHolding waits until c's Fence says it holds the fence (or not) and
// returns when the test saw it.
func awaitHolding(t *testing.T, ctx context.Context, c *stack.Cluster, holding bool) time.Time {
	t.Helper()
	var f fencegatev1alpha1.Fence
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := c.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: "default"}, &f); err != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(f.Status.Conditions, fencegatev1alpha1.ConditionHolding) == holding &&
			meta.FindStatusCondition(f.Status.Conditions, fencegatev1alpha1.ConditionHolding) != nil, nil
	})
	if err != nil {
		t.Fatalf("%s: the Fence never said Holding=%v; status %+v", c.Name, holding, f.Status)
	}
	return time.Now()
}

// failover runs `fencegate failover --to to --from from --wait`.
func failover(t *testing.T, ctx context.Context, s *stack.Stack, to, from string) {
	t.Helper()
	out, stderr, exit, err := s.Failover(ctx, "--to", to, "--from", from, "--wait", "--timeout", "1m")
	if err != nil || exit != 0 {
		t.Fatalf("failover to %s: exit %d %v\n%s\n%s", to, exit, err, out, stderr)
	}
	t.Logf("failover to %s:\n%s", to, out)
}
