package hold_test

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/internal/notify"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/testrun"
)

// TestUnreadableRecordIsHeld: a CronJob that carries a fencegate.dev/held
// annotation fencegate did not write is held all the same on a fenced
// cluster, the bad record set aside; once the cluster holds the fence, its
// release is refused and reported (held, not quiet, counted) until a
// person removed the bad record, and then what the hold recorded is
// released.
func TestUnreadableRecordIsHeld(t *testing.T) {
	h := start(t, fenced)
	ctx := context.Background()
	planted := cronJob("planted", ptr.To(false))
	planted.Annotations = map[string]string{hold.RecordAnnotation: "not a record"}
	if err := h.cp.Client.Create(ctx, planted); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the CronJob with a bad record held, the record set aside", func(c *batchv1.CronJob) bool {
		return suspended(c) && recorded(c) && c.Annotations[hold.UnreadableAnnotation] == "not a record"
	}, "planted")
	if n := h.counter(t, "fencegate_hold_failures_total"); n < 1 {
		t.Errorf("fencegate_hold_failures_total = %v after a bad record was set aside, want it counted", n)
	}

	h.transition(t, active)
	p := h.waitProgress(t, "the release refused, the CronJob held and not quiet", func(k hold.KindProgress) bool {
		return k.Key == active.Key() && k.Pending == 0 && k.Held == 1 && k.Quiet == 0 &&
			len(k.Activity) == 1 && strings.Contains(k.Activity[0], "remove the annotation")
	})
	t.Logf("refused: %s", p.Activity[0])
	var c batchv1.CronJob
	if err := h.cp.Client.Get(ctx, client.ObjectKeyFromObject(planted), &c); err != nil {
		t.Fatal(err)
	}
	if !suspended(&c) {
		t.Fatalf("a CronJob with a bad record was released: annotations %v", c.Annotations)
	}

	// A person checks the CronJob and removes the bad record.
	if err := h.cp.Client.Patch(ctx, &c, client.RawPatch(types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/annotations/fencegate.dev~1held-unreadable"}]`))); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "what the hold recorded released", func(c *batchv1.CronJob) bool { return !suspended(c) && !recorded(c) }, "planted")
	h.waitProgress(t, "nothing held", func(k hold.KindProgress) bool { return k.Held == 0 })
}

// TestTakeoverGraceKeepsHolds: a cluster granted the fence after the
// previous holder's lease expired keeps its actuators held until
// ResumeAtNS, holds those created meanwhile, and releases them all right
// then, with no other change of the fence state to prompt it.
func TestTakeoverGraceKeepsHolds(t *testing.T) {
	h := start(t, fenced)
	ctx := context.Background()
	if err := h.cp.Client.Create(ctx, cronJob("nightly", ptr.To(false))); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "the CronJob held while fenced", func(c *batchv1.CronJob) bool { return suspended(c) && recorded(c) }, "nightly")

	const grace = 4 * time.Second
	granted := active
	resumeAt := time.Now().Add(grace)
	granted.ResumeAtNS = resumeAt.UnixNano()
	h.transition(t, granted)
	h.waitProgress(t, "the CronJob decided for the grant, held", func(k hold.KindProgress) bool {
		return k.Key == granted.Key() && k.Pending == 0 && k.Held == 1
	})
	if err := h.cp.Client.Create(ctx, cronJob("late", ptr.To(false))); err != nil {
		t.Fatal(err)
	}
	h.waitFor(t, "a CronJob created during the grace held", func(c *batchv1.CronJob) bool { return suspended(c) && recorded(c) }, "late")
	h.waitProgress(t, "both counted held", func(k hold.KindProgress) bool { return k.Total == 2 && k.Held == 2 })
	// Up to shortly before the grace ends, nothing is released.
	for time.Until(resumeAt) > 300*time.Millisecond {
		var list batchv1.CronJobList
		if err := h.cp.Client.List(ctx, &list, client.InNamespace("default")); err != nil {
			t.Fatal(err)
		}
		for i := range list.Items {
			if !suspended(&list.Items[i]) {
				t.Fatalf("%s released %s before the takeover grace ended", list.Items[i].Name, time.Until(resumeAt))
			}
		}
		if p := h.holder.Progress("default"); len(p.Kinds) != 1 || p.Kinds[0].Held != len(list.Items) {
			t.Fatalf("progress during the grace = %+v: want every CronJob (%d) counted held", p, len(list.Items))
		}
		time.Sleep(100 * time.Millisecond)
	}
	h.waitFor(t, "the CronJobs released once the grace ended", func(c *batchv1.CronJob) bool { return !suspended(c) && !recorded(c) }, "nightly", "late")
	// Released when the grace ended, not at some later event: nothing
	// else happens here.
	if late := time.Since(resumeAt); late > 5*time.Second {
		t.Errorf("released %s after the takeover grace ended", late)
	}
	h.waitProgress(t, "nothing held after the grace", func(k hold.KindProgress) bool { return k.Held == 0 && k.Total == 2 })
}

// TestNamespaceRelabelRedecides: relabelling a namespace's domain moves
// the objects in it that have no domain label of their own to the new
// domain at once: a CronJob in a namespace moved into a domain this cluster
// does not hold is held without any change of its own, and released when
// the namespace moves back.
func TestNamespaceRelabelRedecides(t *testing.T) {
	cp := cluster.StartForTest(t, cluster.Options{Name: "hold-domains", NoCRDs: true})
	ctx := context.Background()
	mgr, err := ctrl.NewManager(cp.Config, cluster.ManagerOptions(t, cp.Scheme))
	if err != nil {
		t.Fatal(err)
	}
	// As fencegate run: the engine reads the namespaces' labels from the
	// manager's cache.
	eng, err := engine.New(engine.Options{
		Domains:    []string{"default", "payments"},
		Namespaces: domain.NewNamespaceLabels(mgr.GetCache(), mgr.GetCache(), mgr.GetAPIReader()),
	})
	if err != nil {
		t.Fatal(err)
	}
	signals := map[string]*notify.Broadcast{"default": {}, "payments": {}}
	fences := map[string]fencestate.Source{}
	set := func(d string, s fencestate.State) {
		t.Helper()
		s.Domain = d
		if err := eng.WriteFence(ctx, s); err != nil {
			t.Fatal(err)
		}
		signals[d].Signal()
	}
	for d, b := range signals {
		fences[d] = fencestate.Follow(func() (fencestate.State, bool) { return eng.Fence(d) }, b.Subscribe)
	}
	set("default", active)
	set("payments", fenced)
	holder, err := hold.SetupWithManager(mgr, hold.Options{
		Kinds:  []schema.GroupResource{{Group: "batch", Resource: "cronjobs"}},
		Policy: eng, Fences: fences, QuietFor: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	testrun.Start(t, ctx, "manager", mgr.Start)

	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}); err != nil {
		t.Fatal(err)
	}
	moved := cronJob("moved", ptr.To(false))
	moved.Namespace = "shop"
	own := cronJob("own", ptr.To(false))
	own.Namespace = "shop"
	own.Labels[domain.Label] = "default"
	for _, c := range []*batchv1.CronJob{moved, own} {
		if err := cp.Client.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	progress := func(what, d string, ok func(hold.KindProgress) bool) {
		t.Helper()
		var last hold.Progress
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			last = holder.Progress(d)
			return len(last.Kinds) == 1 && ok(last.Kinds[0]), nil
		}); err != nil {
			t.Fatalf("waiting for %s: %v; progress of %s %+v", what, err, d, last)
		}
	}
	cronJobs := func(what string, ok func(*batchv1.CronJob) bool, names ...string) {
		t.Helper()
		var last batchv1.CronJob
		if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			for _, n := range names {
				if err := cp.Client.Get(ctx, types.NamespacedName{Namespace: "shop", Name: n}, &last); err != nil || !ok(&last) {
					return false, nil
				}
			}
			return true, nil
		}); err != nil {
			t.Fatalf("waiting for %s: %v; last seen %s: suspend=%v annotations=%v", what, err, last.Name, suspended(&last), last.Annotations)
		}
	}
	progress("both CronJobs decided in the default domain, none held", "default", func(k hold.KindProgress) bool {
		return k.Total == 2 && k.Held == 0
	})

	relabel := func(value string) {
		t.Helper()
		var ns corev1.Namespace
		if err := cp.Client.Get(ctx, types.NamespacedName{Name: "shop"}, &ns); err != nil {
			t.Fatal(err)
		}
		if value == "" {
			delete(ns.Labels, domain.Label)
		} else {
			ns.Labels = map[string]string{domain.Label: value}
		}
		if err := cp.Client.Update(ctx, &ns); err != nil {
			t.Fatal(err)
		}
	}
	relabel("payments")
	cronJobs("the CronJob moved into the fenced domain held", func(c *batchv1.CronJob) bool { return suspended(c) && recorded(c) }, "moved")
	progress("it counted in its new domain", "payments", func(k hold.KindProgress) bool { return k.Total == 1 && k.Held == 1 })
	progress("the default domain left with the one labelled its own", "default", func(k hold.KindProgress) bool { return k.Total == 1 && k.Held == 0 })
	var c batchv1.CronJob
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(own), &c); err != nil {
		t.Fatal(err)
	}
	if suspended(&c) {
		t.Errorf("the CronJob labelled with its own domain was held when its namespace moved")
	}

	relabel("")
	cronJobs("the CronJob moved back released", func(c *batchv1.CronJob) bool { return !suspended(c) && !recorded(c) }, "moved")
	progress("both back in the default domain", "default", func(k hold.KindProgress) bool { return k.Total == 2 && k.Held == 0 })
}
