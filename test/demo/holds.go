package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/stack"
)

// holdKinds are what the demo's fencegates hold on a cluster that does not
// hold the fence.
var holdKinds = []string{"cronjobs.batch", "kustomizations.kustomize.toolkit.fluxcd.io"}

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

// kustomizationYAML is an actuator both clusters carry, under Flux's real
// CRD: a Kustomization that would apply ./ of the GitRepository apps every
// ten minutes. No Flux controller runs in the demo: fencegate holds it by
// its flag, spec.suspend, all the same.
const kustomizationYAML = `apiVersion: kustomize.toolkit.fluxcd.io/v1
kind: Kustomization
metadata:
  name: apps
  namespace: default
spec:
  interval: 10m
  path: ./
  prune: true
  sourceRef:
    kind: GitRepository
    name: apps
  suspend: false
`

// actuator is an object the walkthrough applies to both clusters, in
// namespace default; fencegate holds each by spec.suspend.
type actuator struct {
	// kind names it in the walkthrough's messages, resource in kubectl get.
	kind, resource string
	gvk            schema.GroupVersionKind
	name           string
}

// actuators are the objects of cronJobYAML and kustomizationYAML.
var actuators = []actuator{
	{kind: "CronJob", resource: "cronjobs", gvk: schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "CronJob"}, name: "nightly-report"},
	{kind: "Kustomization", resource: "kustomizations", gvk: schema.GroupVersionKind{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}, name: "apps"},
}

// actuatorHeld tells whether a cluster's actuator is held by fencegate
// (suspended, with the record of what to restore).
func actuatorHeld(ctx context.Context, c *stack.Cluster, a actuator) (held bool, suspend bool, err error) {
	var o unstructured.Unstructured
	o.SetGroupVersionKind(a.gvk)
	if err := c.ControlPlane.Client.Get(ctx, types.NamespacedName{Namespace: "default", Name: a.name}, &o); err != nil {
		return false, false, err
	}
	_, recorded := o.GetAnnotations()[hold.RecordAnnotation]
	suspend, _, err = unstructured.NestedBool(o.Object, "spec", "suspend")
	if err != nil {
		return false, false, fmt.Errorf("%s %s on %s: %w", a.kind, a.name, c.Name, err)
	}
	return suspend && recorded, suspend, nil
}

// waitHolds waits until every actuator is held on held and running
// (suspend: false, no record) on running, and held's Fence counts them
// held and quiet and says Quiesced.
func (w *walkthrough) waitHolds(ctx context.Context, held, running *stack.Cluster) error {
	var last string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, a := range actuators {
			h, _, err := actuatorHeld(ctx, held, a)
			if err != nil || !h {
				last = fmt.Sprintf("%s's %s not held (%v)", held.Name, a.kind, err)
				return false, nil //nolint:nilerr // keep polling
			}
			h, suspend, err := actuatorHeld(ctx, running, a)
			if err != nil || h || suspend {
				last = fmt.Sprintf("%s's %s not running: held %v, suspend %v (%v)", running.Name, a.kind, h, suspend, err)
				return false, nil //nolint:nilerr // keep polling
			}
		}
		var f fencegatev1alpha1.Fence
		if err := held.ControlPlane.Client.Get(ctx, client.ObjectKey{Name: "default"}, &f); err != nil {
			last = fmt.Sprintf("%s's Fence: %v", held.Name, err)
			return false, nil //nolint:nilerr // keep polling
		}
		n := int32(len(actuators))
		counted := f.Status.Held != nil && f.Status.Held.Held == n && f.Status.Held.Quiet == n
		last = fmt.Sprintf("%s's Fence: held %+v, Quiesced %v", held.Name, f.Status.Held, meta.IsStatusConditionTrue(f.Status.Conditions, fencegatev1alpha1.ConditionQuiesced))
		return counted && meta.IsStatusConditionTrue(f.Status.Conditions, fencegatev1alpha1.ConditionQuiesced), nil
	})
	if err != nil {
		return fmt.Errorf("%s's %s never were held with its Fence Quiesced, or %s's never ran (last: %s)", held.Name, actuatorKinds(), running.Name, last)
	}
	return nil
}

// actuatorKinds names the actuators' kinds: "CronJob and Kustomization".
func actuatorKinds() string {
	kinds := make([]string, 0, len(actuators))
	for _, a := range actuators {
		kinds = append(kinds, a.kind)
	}
	return strings.Join(kinds, " and ")
}

// getActuators shows every actuator on both clusters, and whether it is
// suspended.
func (w *walkthrough) getActuators(ctx context.Context, east, west *stack.Cluster) error {
	resources := make([]string, len(actuators))
	for i, a := range actuators {
		resources[i] = a.resource
	}
	for _, c := range []*stack.Cluster{east, west} {
		_, exit, err := w.kubectl(ctx, c, nil, "get", strings.Join(resources, ","), "-n", "default",
			"-o", "custom-columns=KIND:.kind,NAME:.metadata.name,SUSPEND:.spec.suspend")
		if err != nil {
			return fmt.Errorf("kubectl get the actuators on %s: %w", c.Name, err)
		}
		if exit != 0 {
			return fmt.Errorf("kubectl get the actuators on %s: exit %d", c.Name, exit)
		}
	}
	return nil
}

// holds shows actuators held on the fenced cluster: a CronJob and a Flux
// Kustomization applied to both, suspended by west's fencegate only, and
// west's Fence Quiesced.
func (w *walkthrough) holds(ctx context.Context, east, west *stack.Cluster) error {
	w.title("a CronJob and a Flux Kustomization run on both clusters: west's fencegate holds its own, east's run")
	for _, c := range []*stack.Cluster{east, west} {
		stderr, exit, err := w.kubectl(ctx, c, []byte(cronJobYAML+"---\n"+kustomizationYAML), "apply", "-f", "-")
		if err != nil {
			return fmt.Errorf("apply the CronJob and the Kustomization on %s: %w", c.Name, err)
		}
		if exit != 0 {
			return fmt.Errorf("apply the CronJob and the Kustomization on %s: exit %d %s", c.Name, exit, stderr)
		}
	}
	if err := w.waitHolds(ctx, west, east); err != nil {
		return err
	}
	if err := w.getActuators(ctx, east, west); err != nil {
		return err
	}
	_, exit, err := w.kubectl(ctx, west, nil, "get", "fence", "default", "-o", `jsonpath={.status.held.summary} {.status.conditions[?(@.type=="Quiesced")].reason}{"\n"}`)
	if err != nil {
		return fmt.Errorf("kubectl get fence on west: %w", err)
	}
	if exit != 0 {
		return fmt.Errorf("kubectl get fence on west: exit %d", exit)
	}
	w.proves("west does not hold the fence, so its fencegate suspended the CronJob and the Kustomization (recording suspend: false on each, to restore it exactly) and its Fence says Quiesced: nothing held there still runs. " +
		"No Flux controller runs in this demo: the hold is the flag, spec.suspend; with no controller running the Kustomization has nothing in flight, so it is quiet at once")
	return nil
}

// holdsSwapped shows the holds after a failover to west: east's actuators
// held, west's released as they were.
func (w *walkthrough) holdsSwapped(ctx context.Context, east, west *stack.Cluster) error {
	w.title("the holds moved with the fence: east's CronJob and Kustomization are held, west's run again as they were")
	if err := w.waitHolds(ctx, east, west); err != nil {
		return err
	}
	if err := w.getActuators(ctx, east, west); err != nil {
		return err
	}
	w.proves("the new standby suspended its actuators before the failover command returned, and the new holder set suspend back to false, the value each had")
	return nil
}
