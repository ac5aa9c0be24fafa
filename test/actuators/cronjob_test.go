package actuators

import (
	"context"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/node"
	"github.com/fencegate/fencegate/test/testrun"
)

var (
	active = enginetest.Fence(fencestate.Active, "east", 7, "east", 7)
	fenced = enginetest.Fence(fencestate.Fenced, "east", 7, "west", 8)
)

// startHolder runs fencegate's hold controller for kinds against a control
// plane, deciding with f.
func startHolder(t testing.TB, cp *cluster.ControlPlane, f *enginetest.Switch, kinds ...schema.GroupResource) *hold.Holder {
	t.Helper()
	mgr, err := ctrl.NewManager(cp.Config, cluster.ManagerOptions(t, cp.Scheme))
	if err != nil {
		t.Fatal(err)
	}
	h, err := hold.SetupWithManager(mgr, hold.Options{
		Kinds: kinds, Policy: f.Engine, Fences: map[string]fencestate.Source{"default": f.Source("default")}, QuietFor: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	testrun.Start(t, context.Background(), "manager", mgr.Start)
	return h
}

// jobsOf counts the Jobs the CronJob started.
func jobsOf(t *testing.T, c client.Client, cj *batchv1.CronJob) int {
	t.Helper()
	var jobs batchv1.JobList
	if err := c.List(context.Background(), &jobs, client.InNamespace(cj.Namespace)); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, j := range jobs.Items {
		if ref := metav1.GetControllerOf(&j); ref != nil && ref.UID == cj.UID {
			n++
		}
	}
	return n
}

// untilSecond waits until the wall clock's second of the minute is in
// [from, to]: a CronJob fires on minute boundaries, which a step must
// not straddle.
func untilSecond(from, to int) {
	for s := time.Now().Second(); s < from || s > to; s = time.Now().Second() {
		time.Sleep(200 * time.Millisecond)
	}
}

// pastNextMinute waits until after seconds past the next minute boundary.
func pastNextMinute(after time.Duration) {
	time.Sleep(time.Until(time.Now().Truncate(time.Minute).Add(time.Minute + after)))
}

func waitCronJob(t *testing.T, c client.Client, cj *batchv1.CronJob, what string, ok func(*batchv1.CronJob) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(cj), cj); err != nil {
			return false, nil
		}
		return ok(cj), nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v; suspend=%v annotations=%v", what, err, cj.Spec.Suspend, cj.Annotations)
	}
}

// TestRealCronJobIsHeld: the real kube-controller-manager starts no Job
// of a CronJob that fires every minute while its cluster is fenced, and
// after the cluster holds the fence again resumes it without a burst of
// the runs it missed.
func TestRealCronJobIsHeld(t *testing.T) {
	n := node.StartForTest(t, node.Options{Name: "actuators"})
	f := enginetest.NewSwitch(t, fenced)
	holder := startHolder(t, n.ControlPlane, f, schema.GroupResource{Group: "batch", Resource: "cronjobs"})
	ctx := context.Background()

	untilSecond(5, 40)
	cj := &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "tick", Namespace: metav1.NamespaceDefault},
		Spec: batchv1.CronJobSpec{
			Schedule: "* * * * *",
			Suspend:  ptr.To(false),
			// Every Job it starts is kept, to be counted.
			SuccessfulJobsHistoryLimit: ptr.To[int32](10),
			FailedJobsHistoryLimit:     ptr.To[int32](10),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{
				ActiveDeadlineSeconds: ptr.To[int64](5),
				BackoffLimit:          ptr.To[int32](0),
				Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
					RestartPolicy:                 corev1.RestartPolicyNever,
					TerminationGracePeriodSeconds: ptr.To[int64](1),
					Containers:                    []corev1.Container{{Name: "tick", Image: node.PauseImage, ImagePullPolicy: corev1.PullNever}},
				}},
			}},
		},
	}
	if err := n.Client.Create(ctx, cj); err != nil {
		t.Fatal(err)
	}
	waitCronJob(t, n.Client, cj, "the CronJob held", func(c *batchv1.CronJob) bool {
		_, recorded := c.Annotations[hold.RecordAnnotation]
		return ptr.Deref(c.Spec.Suspend, false) && recorded
	})
	created := time.Now()

	pastNextMinute(15 * time.Second)
	if got := jobsOf(t, n.Client, cj); got != 0 {
		t.Fatalf("the CronJob started %d Jobs while fenced (held since %s)", got, created.Format(time.TimeOnly))
	}
	if p := holder.Progress("default"); len(p.Kinds) != 1 || p.Kinds[0].Held != 1 || p.Kinds[0].Quiet != 1 {
		t.Errorf("progress while fenced: %+v, want 1 CronJob held and quiet", p)
	}

	f.Set(t, active)
	released := time.Now()
	waitCronJob(t, n.Client, cj, "the CronJob released", func(c *batchv1.CronJob) bool {
		_, recorded := c.Annotations[hold.RecordAnnotation]
		return c.Spec.Suspend != nil && !*c.Spec.Suspend && !recorded
	})
	// The controller may start the latest run it missed, never all of
	// them.
	time.Sleep(10 * time.Second)
	burst := jobsOf(t, n.Client, cj)
	if burst > 1 {
		t.Errorf("%d Jobs right after the release: a burst of missed runs", burst)
	}
	pastNextMinute(20 * time.Second)
	resumed := jobsOf(t, n.Client, cj)
	if resumed <= burst {
		t.Errorf("no Job started in the minute after the release (%d before, %d after, released at %s)", burst, resumed, released.Format(time.TimeOnly))
	}
	if resumed > burst+1 {
		t.Errorf("%d Jobs started in the minute after the release, want 1", resumed-burst)
	}
	t.Logf("held from %s, released at %s: %d Jobs at release, %d a minute later", created.Format(time.TimeOnly), released.Format(time.TimeOnly), burst, resumed)
}
