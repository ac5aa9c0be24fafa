package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/stack"
)

// reportJob is a CronJob an actuator runs on every cluster.
func reportJob() *batchv1.CronJob {
	return &batchv1.CronJob{
		ObjectMeta: metav1.ObjectMeta{Name: "report", Namespace: metav1.NamespaceDefault},
		Spec: batchv1.CronJobSpec{
			Schedule: "0 3 * * *",
			Suspend:  ptr.To(false),
			JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "report", Image: "report"}},
			}}}},
		},
	}
}

// waitCronJob polls a cluster's CronJob report until ok.
func waitCronJob(t *testing.T, ctx context.Context, c *stack.Cluster, what string, ok func(*batchv1.CronJob) bool) *batchv1.CronJob {
	t.Helper()
	var cj batchv1.CronJob
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.ControlPlane.Client.Get(ctx, types.NamespacedName{Namespace: metav1.NamespaceDefault, Name: "report"}, &cj); err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		return ok(&cj), nil
	})
	if err != nil {
		t.Fatalf("%s: the CronJob never became %s: %v; suspend=%v annotations=%v", c.Label, what, err, ptr.Deref(cj.Spec.Suspend, false), cj.Annotations)
	}
	return &cj
}

func heldCronJob(cj *batchv1.CronJob) bool {
	_, recorded := cj.Annotations[hold.RecordAnnotation]
	return ptr.Deref(cj.Spec.Suspend, false) && recorded
}

func releasedCronJob(cj *batchv1.CronJob) bool {
	_, recorded := cj.Annotations[hold.RecordAnnotation]
	return cj.Spec.Suspend != nil && !*cj.Spec.Suspend && !recorded
}

// quiesced returns a check that the Fence's Quiesced condition has status
// and reason, and, for a held count, that status.held says so.
func quiesced(status metav1.ConditionStatus, reason string, held int32) func(*fencegatev1alpha1.Fence) bool {
	return func(f *fencegatev1alpha1.Fence) bool {
		c := meta.FindStatusCondition(f.Status.Conditions, fencegatev1alpha1.ConditionQuiesced)
		return c != nil && c.Status == status && c.Reason == reason && (held < 0 || f.Status.Held != nil && f.Status.Held.Held == held && f.Status.Held.Quiet == held)
	}
}

// TestActuatorsHeldAcrossAFailover: real fencegate processes on two real
// control planes hold CronJobs on the cluster that does not hold the fence
// (and say so in its Fence: HELD, Quiesced), refuse a person's change of
// one there while admitting their own holds (CronJobs are a fenced kind),
// and swap holds on a failover, which waits for the old holder to quiesce.
func TestActuatorsHeldAcrossAFailover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := stack.StartForTest(t, ctx, stack.Options{
		Clusters:     []stack.ClusterSpec{{Name: "east", Epoch: 1}, {Name: "west", Epoch: 1}},
		MTLS:         true,
		HoldKinds:    []string{"cronjobs.batch"},
		HoldQuietFor: time.Second,
		FencedKinds:  []stack.FencedKind{{Group: "batch", Kind: "CronJob", Resource: "cronjobs"}},
		ExemptGroups: []string{"dr-restore"},
		Say:          t.Logf,
	})
	east, west := s.Cluster("east"), s.Cluster("west")

	// The holder creates its CronJob; the standby's comes from a restore
	// (an exempt group), as a fenced cluster admits no one else's.
	if err := east.ControlPlane.Client.Create(ctx, reportJob()); err != nil {
		t.Fatal(err)
	}
	if err := impersonating(t, west.ControlPlane, "velero", []string{"dr-restore"}, nil).Create(ctx, reportJob()); err != nil {
		t.Fatalf("west: restore the CronJob as an exempt group: %v", err)
	}
	waitCronJob(t, ctx, west, "held", heldCronJob)
	waitFence(t, ctx, west, "Quiesced with its CronJob held", 30*time.Second, quiesced(metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced, 1))
	waitFence(t, ctx, east, "acting (Quiesced False, FenceHeld)", 30*time.Second, quiesced(metav1.ConditionFalse, fencegatev1alpha1.ReasonFenceHeld, 0))
	if cj := waitCronJob(t, ctx, east, "running", func(cj *batchv1.CronJob) bool { return !ptr.Deref(cj.Spec.Suspend, false) }); heldCronJob(cj) {
		t.Errorf("east holds the fence, yet its CronJob is held: %v", cj.Annotations)
	}

	// A person resuming west's CronJob is refused: CronJobs are fenced.
	err := west.ControlPlane.Client.Patch(ctx, reportJob(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)))
	if err == nil || !strings.Contains(err.Error(), "CronJob is a kind fenced like Components here") || !strings.Contains(err.Error(), "does not hold the ownership fence") {
		t.Fatalf("west: a person's resume of a held CronJob: %v, want the fence's denial", err)
	}

	out, errOut, exit, err := s.Failover(ctx, "--to", "west", "--from", "east", "--wait", "--timeout", "1m", "--quiesce-timeout", "1m")
	if err != nil || exit != 0 {
		t.Fatalf("failover to west: exit %d, %v\n%s%s", exit, err, out, errOut)
	}
	t.Logf("failover:\n%s", out)
	if !strings.Contains(out, "old holder quiesced") || !strings.Contains(out, "east: 1 held objects, all quiet") {
		t.Errorf("the failover's timeline does not show east quiesced:\n%s", out)
	}
	waitCronJob(t, ctx, east, "held", heldCronJob)
	waitCronJob(t, ctx, west, "released", releasedCronJob)
	waitFence(t, ctx, east, "Quiesced with its CronJob held", 30*time.Second, quiesced(metav1.ConditionTrue, fencegatev1alpha1.ReasonQuiesced, 1))
	waitFence(t, ctx, west, "acting", 30*time.Second, quiesced(metav1.ConditionFalse, fencegatev1alpha1.ReasonFenceHeld, 0))

	// With east's fencegate dead nothing holds there any more, but its
	// API server fails closed for the fenced kinds: no write of a
	// CronJob gets through (the webhooks' failurePolicy is Fail).
	for _, r := range east.Replicas {
		r.Run.Kill()
	}
	err = east.ControlPlane.Client.Patch(ctx, reportJob(), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"suspend":false}}`)))
	if err == nil || !strings.Contains(err.Error(), "failed calling webhook") {
		t.Errorf("east, its fencegate dead: resuming the CronJob: %v, want the webhook's failure", err)
	}
	if cj := waitCronJob(t, ctx, east, "still held", heldCronJob); !heldCronJob(cj) {
		t.Errorf("east's CronJob was resumed while its fencegate was dead")
	}
}
