package main

import (
	"context"
	"fmt"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/stack"
)

// holdKinds are what the demo's fencegates hold on a cluster that does not
// hold the fence.
var holdKinds = []string{"cronjobs.batch"}

// cronJobYAML is an actuator both clusters run: a nightly report.
const cronJobYAML = `apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly-report
  namespace: default
spec:
  schedule: "0 3 * * *"
  suspend: false
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: report
              image: report:1.0
`

// cronJobHeld tells whether a cluster's CronJob is held by fencegate
// (suspended, with the record of what to restore).
func cronJobHeld(ctx context.Context, c *stack.Cluster) (held bool, suspend bool, err error) {
	var cj batchv1.CronJob
	if err := c.ControlPlane.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: "nightly-report"}, &cj); err != nil {
		return false, false, err
	}
	_, recorded := cj.Annotations[hold.RecordAnnotation]
	suspend = cj.Spec.Suspend != nil && *cj.Spec.Suspend
	return suspend && recorded, suspend, nil
}

// waitHolds waits until the CronJob is held on held and running (suspend:
// false, no record) on running, and held's Fence counts it held and quiet
// and says Quiesced.
func (w *walkthrough) waitHolds(ctx context.Context, held, running *stack.Cluster) error {
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		h, _, err := cronJobHeld(ctx, held)
		if err != nil || !h {
			return false, nil //nolint:nilerr // keep polling
		}
		h, suspend, err := cronJobHeld(ctx, running)
		if err != nil || h || suspend {
			return false, nil //nolint:nilerr // keep polling
		}
		var f fencegatev1alpha1.Fence
		if err := held.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: "default"}, &f); err != nil {
			return false, nil //nolint:nilerr // keep polling
		}
		counted := f.Status.Held != nil && f.Status.Held.Held == 1 && f.Status.Held.Quiet == 1
		return counted && meta.IsStatusConditionTrue(f.Status.Conditions, fencegatev1alpha1.ConditionQuiesced), nil
	})
	if err != nil {
		return fmt.Errorf("%s's CronJob never was held with its Fence Quiesced, or %s's never ran", held.Name, running.Name)
	}
	return nil
}

// holds shows an actuator held on the fenced cluster: a CronJob applied
// to both, suspended by west's fencegate only, and west's Fence Quiesced.
func (w *walkthrough) holds(ctx context.Context, east, west *stack.Cluster) error {
	w.title("a CronJob runs on both clusters: west's fencegate holds its own, east's runs")
	for _, c := range []*stack.Cluster{east, west} {
		if stderr, exit, err := w.kubectl(ctx, c, []byte(cronJobYAML), "apply", "-f", "-"); err != nil || exit != 0 {
			return fmt.Errorf("apply the CronJob on %s: exit %d %v %s", c.Name, exit, err, stderr)
		}
	}
	if err := w.waitHolds(ctx, west, east); err != nil {
		return err
	}
	for _, c := range []*stack.Cluster{east, west} {
		if _, exit, err := w.kubectl(ctx, c, nil, "get", "cronjobs", "-n", "default"); err != nil || exit != 0 {
			return fmt.Errorf("kubectl get cronjobs on %s: exit %d %v", c.Name, exit, err)
		}
	}
	if _, exit, err := w.kubectl(ctx, west, nil, "get", "fence", "default", "-o", `jsonpath={.status.held.summary} {.status.conditions[?(@.type=="Quiesced")].reason}{"\n"}`); err != nil || exit != 0 {
		return fmt.Errorf("kubectl get fence on west: exit %d %v", exit, err)
	}
	w.proves("west does not hold the fence, so its fencegate suspended the CronJob (recording suspend: false, to restore it exactly) and its Fence says Quiesced: nothing held there still runs")
	return nil
}

// holdsSwapped shows the holds after a failover to west: east's CronJob
// held, west's released as it was.
func (w *walkthrough) holdsSwapped(ctx context.Context, east, west *stack.Cluster) error {
	w.title("the holds moved with the fence: east's CronJob is held, west's runs again as it was")
	if err := w.waitHolds(ctx, east, west); err != nil {
		return err
	}
	for _, c := range []*stack.Cluster{east, west} {
		if _, exit, err := w.kubectl(ctx, c, nil, "get", "cronjobs", "-n", "default"); err != nil || exit != 0 {
			return fmt.Errorf("kubectl get cronjobs on %s: exit %d %v", c.Name, exit, err)
		}
	}
	w.proves("the new standby suspended its actuator before the failover command returned, and the new holder set suspend back to false, the value it had")
	return nil
}
