package hold_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/testrun"
)

var (
	active = enginetest.Fence(fencestate.Active, "east", 7, "east", 7)
	fenced = enginetest.Fence(fencestate.Fenced, "east", 7, "west", 8)
)

// harness is a real API server, the shipped policies in a real engine, and
// the hold controller holding CronJobs.
type harness struct {
	cp      *cluster.ControlPlane
	c       client.Client
	fence   *enginetest.Switch
	holder  *hold.Holder
	quietly time.Duration
	// metrics has the metrics of the hold controller newManager made last.
	metrics *prometheus.Registry
}

func start(t testing.TB, initial fencestate.State) *harness {
	return startWith(t, initial, time.Second, 0)
}

// startWith starts the harness with QuietFor quietly and, when qps is not
// 0, the controller's client limited as fencegate run limits it.
func startWith(t testing.TB, initial fencestate.State, quietly time.Duration, qps float32) *harness {
	t.Helper()
	h := newHarness(t, initial, quietly)
	testrun.Start(t, context.Background(), "manager", h.newManager(t, qps).Start)
	return h
}

// newHarness starts the API server and the engine; newManager makes the
// manager that runs the hold controller.
func newHarness(t testing.TB, initial fencestate.State, quietly time.Duration) *harness {
	t.Helper()
	return &harness{
		cp:      cluster.StartForTest(t, cluster.Options{Name: "hold", NoCRDs: true}),
		fence:   enginetest.NewSwitch(t, initial),
		quietly: quietly,
	}
}

// restConfig is the API server's config with the client limited as
// fencegate run limits it to qps (none for a negative qps, its default
// for 0).
func (h *harness) restConfig(qps float32) *rest.Config {
	cfg := rest.CopyConfig(h.cp.Config)
	switch {
	case qps > 0:
		cfg.QPS, cfg.Burst = qps, int(2*qps)
	case qps < 0:
		// No client-side limit, as fencegate run --kube-api-qps=-1.
		cfg.QPS = qps
	}
	return cfg
}

func (h *harness) newManager(t testing.TB, qps float32) manager.Manager {
	t.Helper()
	mgr, err := ctrl.NewManager(h.restConfig(qps), cluster.ManagerOptions(t, h.cp.Scheme))
	if err != nil {
		t.Fatal(err)
	}
	h.c = mgr.GetClient()
	h.metrics = prometheus.NewRegistry()
	if h.holder, err = hold.SetupWithManager(mgr, hold.Options{
		Kinds:  []schema.GroupResource{{Group: "batch", Resource: "cronjobs"}},
		Policy: h.fence.Engine, Fences: map[string]fencestate.Source{"default": h.fence.Source("default")}, QuietFor: h.quietly,
		Registerer: h.metrics,
	}); err != nil {
		t.Fatal(err)
	}
	return mgr
}

// transition writes s as the agent does, and signals it.
func (h *harness) transition(t testing.TB, s fencestate.State) { h.fence.Set(t, s) }

func cronJob(name string, suspend *bool) *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": name}},
		Spec: batchv1.CronJobSpec{
			Schedule: "*/5 * * * *",
			Suspend:  suspend,
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "report", Image: "busybox"}},
			}}}},
		},
	}
}

// waitFor polls until every named CronJob satisfies ok.
func (h *harness) waitFor(t *testing.T, what string, ok func(*batchv1.CronJob) bool, names ...string) {
	t.Helper()
	var last batchv1.CronJob
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			if err := h.cp.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: n}, &last); err != nil {
				return false, nil
			}
			if !ok(&last) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; last seen %s: suspend=%v annotations=%v", what, err, last.Name, ptr.Deref(last.Spec.Suspend, false), last.Annotations)
	}
}

func (h *harness) waitProgress(t *testing.T, what string, ok func(hold.KindProgress) bool) hold.KindProgress {
	t.Helper()
	var last hold.Progress
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		last = h.holder.Progress("default")
		return len(last.Kinds) == 1 && ok(last.Kinds[0]), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; progress %+v", what, err, last)
	}
	return last.Kinds[0]
}

func suspended(c *batchv1.CronJob) bool { return ptr.Deref(c.Spec.Suspend, false) }
func recorded(c *batchv1.CronJob) bool  { _, ok := c.Annotations[hold.RecordAnnotation]; return ok }

// TestHoldAndReleaseCronJobs holds CronJobs on a real API server while the
// cluster does not hold the fence, and releases exactly what it held.
func TestHoldAndReleaseCronJobs(t *testing.T) {
	h := start(t, active)
	ctx := context.Background()
	mine := cronJob("mine", ptr.To(false))      // suspend: false, as its owner wrote it
	defaulted := cronJob("defaulted", nil)      // suspend defaulted by the API server
	persons := cronJob("persons", ptr.To(true)) // a person suspended it
	for _, c := range []*batchv1.CronJob{mine, defaulted, persons} {
		if err := h.cp.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	h.waitProgress(t, "every CronJob decided while active, none held", func(k hold.KindProgress) bool {
		return k.Started && k.Pending == 0 && k.Total == 3 && k.Held == 0
	})
	var before batchv1.CronJob
	if err := h.cp.Client.Get(ctx, client.ObjectKeyFromObject(mine), &before); err != nil {
		t.Fatal(err)
	}

	h.transition(t, fenced)
	h.waitFor(t, "fencegate to hold the CronJobs it found running", func(c *batchv1.CronJob) bool { return suspended(c) && recorded(c) }, "mine", "defaulted")
	h.waitFor(t, "the person's suspend to stay the person's", func(c *batchv1.CronJob) bool { return suspended(c) && !recorded(c) }, "persons")
	// One created while fenced is held too.
	if err := h.cp.Client.Create(ctx, cronJob("late", ptr.To(false))); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "a CronJob created while fenced to be held", suspended, "late")
	p := h.waitProgress(t, "every held CronJob quiet", func(k hold.KindProgress) bool { return k.Held == 4 && k.Quiet == 4 })
	t.Logf("fenced: %+v", p)

	// A Job still running keeps one from being quiet.
	running := &batchv1.CronJob{}
	if err := h.cp.Client.Get(ctx, client.ObjectKeyFromObject(mine), running); err != nil {
		t.Fatal(err)
	}
	running.Status.Active = []corev1.ObjectReference{{Kind: "Job", Namespace: "default", Name: "mine-1"}}
	if err := h.cp.Client.Status().Update(ctx, running); err != nil {
		t.Fatal(err)
	}
	h.waitProgress(t, "the CronJob with a running Job to be loud", func(k hold.KindProgress) bool {
		return k.Quiet == 3 && len(k.Activity) == 1 && k.Activity[0] == "CronJob default/mine: 1 Job still running"
	})
	running.Status.Active = nil
	if err := h.cp.Client.Status().Update(ctx, running); err != nil {
		t.Fatal(err)
	}
	h.waitProgress(t, "it to be quiet again once its Job ended", func(k hold.KindProgress) bool { return k.Quiet == 4 })

	// Someone resumes one while fenced: it is held again.
	if err := h.cp.Client.Patch(ctx, cronJob("defaulted", nil), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)), client.FieldOwner("kubectl-patch")); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "a CronJob resumed while fenced to be held again", func(c *batchv1.CronJob) bool { return suspended(c) && recorded(c) }, "defaulted")
	// A person applies suspend: true to "late" too: they now share it.
	apply := `{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"name":"late","namespace":"default"},"spec":{"suspend":true}}`
	if err := h.cp.Client.Patch(ctx, cronJob("late", nil), client.RawPatch(types.ApplyPatchType, []byte(apply)), client.FieldOwner("a-person"), client.ForceOwnership); err != nil {
		t.Fatal(err)
	}

	h.transition(t, active)
	h.waitFor(t, "fencegate to release what it held alone", func(c *batchv1.CronJob) bool { return !suspended(c) && !recorded(c) }, "mine", "defaulted")
	h.waitFor(t, "what a person suspended to stay suspended", func(c *batchv1.CronJob) bool { return suspended(c) && !recorded(c) }, "persons", "late")
	h.waitProgress(t, "nothing held", func(k hold.KindProgress) bool { return k.Pending == 0 && k.Held == 0 && k.Total == 4 })

	var after batchv1.CronJob
	if err := h.cp.Client.Get(ctx, client.ObjectKeyFromObject(mine), &after); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(before.Spec, after.Spec) || !reflect.DeepEqual(before.Annotations, after.Annotations) || !reflect.DeepEqual(before.Labels, after.Labels) {
		b, _ := json.Marshal(before.Spec)
		a, _ := json.Marshal(after.Spec)
		t.Errorf("release did not restore the CronJob exactly:\nbefore %s %v\n after %s %v", b, before.Annotations, a, after.Annotations)
	}
}

// TestUnknownStateKeepsHolds: while the fence state is unknown (the
// authority unreachable), what is held stays held.
func TestUnknownStateKeepsHolds(t *testing.T) {
	h := start(t, fenced)
	ctx := context.Background()
	if err := h.cp.Client.Create(ctx, cronJob("nightly", ptr.To(false))); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the CronJob held", func(c *batchv1.CronJob) bool { return suspended(c) && recorded(c) }, "nightly")
	unknown := fenced
	unknown.Status, unknown.Reason = fencestate.Unknown, "AUTHORITY_UNREACHABLE"
	h.transition(t, unknown)
	h.waitProgress(t, "the CronJob decided for the unknown state", func(k hold.KindProgress) bool {
		return k.Key.Status == fencestate.Unknown && k.Pending == 0 && k.Held == 1
	})
	var c batchv1.CronJob
	if err := h.cp.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "nightly"}, &c); err != nil {
		t.Fatal(err)
	}
	if !suspended(&c) || !recorded(&c) {
		t.Errorf("the unknown state released the CronJob: suspend=%v annotations=%v", suspended(&c), c.Annotations)
	}
}

// TestAParentThatCouldRevertAHoldKeepsItLoud: a CronJob applied by a Flux
// Kustomization (its labels say so) is held, but while the Kustomization is
// not held (here: its kind is not held at all) the Kustomization may apply
// suspend: false again, so the CronJob is not counted quiet, and the
// progress names the parent.
func TestAParentThatCouldRevertAHoldKeepsItLoud(t *testing.T) {
	h := start(t, fenced)
	ctx := context.Background()
	cj := cronJob("applied", ptr.To(false))
	cj.Labels["kustomize.toolkit.fluxcd.io/name"] = "apps"
	cj.Labels["kustomize.toolkit.fluxcd.io/namespace"] = "flux-system"
	if err := h.cp.Client.Create(ctx, cj); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the CronJob held", func(c *batchv1.CronJob) bool { return suspended(c) && recorded(c) }, "applied")
	want := "CronJob default/applied: its parent Kustomization.kustomize.toolkit.fluxcd.io flux-system/apps may revert the hold: that kind is not held here (hold.kinds)"
	h.waitProgress(t, "the CronJob held but loud, naming its parent", func(k hold.KindProgress) bool {
		return k.Held == 1 && k.Quiet == 0 && len(k.Activity) == 1 && k.Activity[0] == want
	})
	// The parent sets it back, as its apply would: it is held again.
	reverted := cronJob("applied", nil)
	if err := h.cp.Client.Patch(ctx, reverted, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)), client.FieldOwner("kustomize-controller")); err != nil {
		t.Fatal(err)
	}
	if suspended(reverted) {
		t.Fatal("the parent's patch did not set suspend: false")
	}
	h.waitFor(t, "the CronJob held again", func(c *batchv1.CronJob) bool {
		return c.ResourceVersion != reverted.ResourceVersion && suspended(c) && recorded(c)
	}, "applied")
}
