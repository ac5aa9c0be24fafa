package actuators

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/pinned"
)

// heldField is a field a shipped rule sets when it holds, at its held value
// (as JSON decodes it).
type heldField struct {
	path  []string
	value any
}

// realKind is a kind a shipped rule holds, with the CRD of the project that
// defines it and an object of that kind as its users write one.
type realKind struct {
	// rule is the rule's name in policies/hold.rego.
	rule string
	// module is the module of hack/tools/crds whose pinned version carries
	// the CRD, at path crd inside it.
	module, crd string
	// generated: the module carries the kind's API types, not its CRD, and
	// crd is the file that controller-gen generates from them, as the
	// project does (pinned.GenerateCRDs).
	generated bool
	// resource is what the hold controller is configured with, and kind
	// the kind's name in its progress (Kind.group).
	resource schema.GroupResource
	kind     string
	// object is created while the cluster holds the fence.
	object map[string]any
	// held are the fields the rule sets.
	held []heldField
	// activity is what the held object still reports with no actuator
	// running ("" when it goes quiet).
	activity string
}

// shippedKinds are the kinds of the shipped rules that are tested here: all
// but the Flux Kustomization (held by the real kustomize-controller in
// TestRealFluxIsHeld, with CRDs from hack/tools/flux) and the CronJob (a
// built-in kind, TestRealCronJobIsHeld). The HelmRelease's CRD is
// generated from helm-controller's API module: the proxy does not serve its
// root module, which carries the CRD file.
func shippedKinds() []realKind {
	return []realKind{
		{
			rule:      "flux-helmrelease",
			module:    "github.com/fluxcd/helm-controller/api",
			crd:       "helm.toolkit.fluxcd.io_helmreleases.yaml",
			generated: true,
			resource:  schema.GroupResource{Group: "helm.toolkit.fluxcd.io", Resource: "helmreleases"},
			kind:      "HelmRelease.helm.toolkit.fluxcd.io",
			// As Flux's guides write one: a chart from a HelmRepository,
			// remediation, values. No actuator writes a status, so nothing
			// reports a reconciliation: held, it is quiet.
			object: map[string]any{
				"apiVersion": "helm.toolkit.fluxcd.io/v2",
				"kind":       "HelmRelease",
				"metadata": map[string]any{
					"name":      "podinfo",
					"namespace": "default",
					"labels":    map[string]any{"app.kubernetes.io/part-of": "shop"},
				},
				"spec": map[string]any{
					"interval":    "10m",
					"timeout":     "5m",
					"releaseName": "podinfo",
					"chart": map[string]any{
						"spec": map[string]any{
							"chart":             "podinfo",
							"version":           "6.7.*",
							"sourceRef":         map[string]any{"kind": "HelmRepository", "name": "podinfo", "namespace": "flux-system"},
							"interval":          "1h",
							"reconcileStrategy": "ChartVersion",
						},
					},
					"dependsOn": []any{map[string]any{"name": "redis"}},
					"install":   map[string]any{"remediation": map[string]any{"retries": int64(3)}},
					"upgrade": map[string]any{
						"cleanupOnFail": true,
						"remediation":   map[string]any{"retries": int64(3), "remediateLastFailure": true, "strategy": "rollback"},
					},
					"driftDetection": map[string]any{"mode": "enabled"},
					"values": map[string]any{
						"replicaCount": int64(2),
						"redis":        map[string]any{"enabled": false},
						"ingress": map[string]any{
							"enabled":   true,
							"className": "nginx",
							"hosts": []any{map[string]any{
								"host":  "podinfo.shop.example.invalid",
								"paths": []any{map[string]any{"path": "/", "pathType": "ImplementationSpecific"}},
							}},
						},
						"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "64Mi"}},
					},
				},
			},
			held: []heldField{{path: []string{"spec", "suspend"}, value: true}},
		},
		{
			rule:     "argocd-application",
			module:   "github.com/argoproj/argo-cd/v3",
			crd:      "manifests/crds/application-crd.yaml",
			resource: schema.GroupResource{Group: "argoproj.io", Resource: "applications"},
			kind:     "Application.argoproj.io",
			object: map[string]any{
				"apiVersion": "argoproj.io/v1alpha1",
				"kind":       "Application",
				"metadata": map[string]any{
					"name":      "guestbook",
					"namespace": "default",
					"labels":    map[string]any{"app.kubernetes.io/part-of": "shop"},
					"annotations": map[string]any{
						"notifications.argoproj.io/subscribe.on-sync-succeeded.slack": "deploys",
					},
				},
				"spec": map[string]any{
					"project": "default",
					"source": map[string]any{
						"repoURL":        "https://git.example.invalid/argocd-example-apps.git",
						"targetRevision": "HEAD",
						"path":           "guestbook",
					},
					"destination": map[string]any{"server": "https://kubernetes.default.svc", "namespace": "guestbook"},
					"syncPolicy": map[string]any{
						"automated":   map[string]any{"prune": true, "selfHeal": true},
						"syncOptions": []any{"CreateNamespace=true"},
						"retry": map[string]any{
							"limit":   int64(5),
							"backoff": map[string]any{"duration": "5s", "factor": int64(2), "maxDuration": "3m"},
						},
					},
				},
			},
			held: []heldField{{path: []string{"spec", "syncPolicy", "automated", "enabled"}, value: false}},
		},
		{
			rule:     "keda-scaledobject",
			module:   "github.com/kedacore/keda/v2",
			crd:      "config/crd/bases/keda.sh_scaledobjects.yaml",
			resource: schema.GroupResource{Group: "keda.sh", Resource: "scaledobjects"},
			kind:     "ScaledObject.keda.sh",
			// No annotations of its own: releasing leaves none.
			object: map[string]any{
				"apiVersion": "keda.sh/v1alpha1",
				"kind":       "ScaledObject",
				"metadata":   map[string]any{"name": "worker", "namespace": "default"},
				"spec": map[string]any{
					"scaleTargetRef":  map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "worker"},
					"pollingInterval": int64(30),
					"cooldownPeriod":  int64(300),
					"minReplicaCount": int64(1),
					"maxReplicaCount": int64(10),
					"triggers": []any{map[string]any{
						"type": "cron",
						"metadata": map[string]any{
							"timezone": "Europe/Amsterdam", "start": "0 8 * * *", "end": "0 18 * * *", "desiredReplicas": "5",
						},
					}},
				},
			},
			held:     []heldField{{path: []string{"metadata", "annotations", "autoscaling.keda.sh/paused"}, value: "true"}},
			activity: "KEDA does not report it paused (no Paused=True condition)",
		},
		{
			rule:     "keda-scaledjob",
			module:   "github.com/kedacore/keda/v2",
			crd:      "config/crd/bases/keda.sh_scaledjobs.yaml",
			resource: schema.GroupResource{Group: "keda.sh", Resource: "scaledjobs"},
			kind:     "ScaledJob.keda.sh",
			object: map[string]any{
				"apiVersion": "keda.sh/v1alpha1",
				"kind":       "ScaledJob",
				"metadata": map[string]any{
					"name":        "orders",
					"namespace":   "default",
					"annotations": map[string]any{"team.example/owner": "payments"},
				},
				"spec": map[string]any{
					"jobTargetRef": map[string]any{
						"parallelism":  int64(1),
						"completions":  int64(1),
						"backoffLimit": int64(4),
						"template": map[string]any{"spec": map[string]any{
							"restartPolicy": "Never",
							"containers": []any{map[string]any{
								"name":  "consumer",
								"image": "registry.example.invalid/orders-consumer:1.4.2",
								"args":  []any{"--once"},
								"env": []any{map[string]any{
									"name": "RABBITMQ_URL",
									"valueFrom": map[string]any{
										"secretKeyRef": map[string]any{"name": "rabbitmq", "key": "url"},
									},
								}},
							}},
						}},
					},
					"pollingInterval":            int64(30),
					"maxReplicaCount":            int64(10),
					"successfulJobsHistoryLimit": int64(5),
					"failedJobsHistoryLimit":     int64(5),
					"triggers": []any{map[string]any{
						"type": "rabbitmq",
						"metadata": map[string]any{
							"queueName": "orders", "mode": "QueueLength", "value": "20", "hostFromEnv": "RABBITMQ_URL",
						},
					}},
				},
			},
			held:     []heldField{{path: []string{"metadata", "annotations", "autoscaling.keda.sh/paused"}, value: "true"}},
			activity: "KEDA does not report it paused (no Paused=True condition)",
		},
		{
			rule:     "velero-schedule",
			module:   "github.com/vmware-tanzu/velero",
			crd:      "config/crd/v1/bases/velero.io_schedules.yaml",
			resource: schema.GroupResource{Group: "velero.io", Resource: "schedules"},
			kind:     "Schedule.velero.io",
			// As velero schedule create writes it: no paused.
			object: map[string]any{
				"apiVersion": "velero.io/v1",
				"kind":       "Schedule",
				"metadata": map[string]any{
					"name":      "daily",
					"namespace": "default",
					"labels":    map[string]any{"velero.io/storage-location": "default"},
				},
				"spec": map[string]any{
					"schedule":                   "0 3 * * *",
					"useOwnerReferencesInBackup": false,
					"template": map[string]any{
						"includedNamespaces": []any{"shop"},
						"labelSelector":      map[string]any{"matchLabels": map[string]any{"backup": "daily"}},
						"snapshotVolumes":    true,
						"storageLocation":    "default",
						"ttl":                "720h0m0s",
					},
				},
			},
			held: []heldField{{path: []string{"spec", "paused"}, value: true}},
		},
		{
			rule:     "argo-cronworkflow",
			module:   "github.com/argoproj/argo-workflows/v4",
			crd:      "manifests/base/crds/full/argoproj.io_cronworkflows.yaml",
			resource: schema.GroupResource{Group: "argoproj.io", Resource: "cronworkflows"},
			kind:     "CronWorkflow.argoproj.io",
			// As argo cron resume leaves it: suspend false.
			object: map[string]any{
				"apiVersion": "argoproj.io/v1alpha1",
				"kind":       "CronWorkflow",
				"metadata":   map[string]any{"name": "hourly-report", "namespace": "default"},
				"spec": map[string]any{
					"schedules":                  []any{"0 * * * *"},
					"timezone":                   "Europe/Amsterdam",
					"concurrencyPolicy":          "Forbid",
					"startingDeadlineSeconds":    int64(60),
					"successfulJobsHistoryLimit": int64(3),
					"suspend":                    false,
					"workflowSpec": map[string]any{
						"entrypoint": "report",
						"templates": []any{map[string]any{
							"name": "report",
							"container": map[string]any{
								"image":   "registry.example.invalid/report:2.0",
								"command": []any{"sh", "-c"},
								"args":    []any{"report --since 1h"},
							},
						}},
					},
				},
			},
			held: []heldField{{path: []string{"spec", "suspend"}, value: true}},
		},
		{
			rule:     "crossplane-managed",
			module:   "github.com/crossplane-contrib/provider-kubernetes",
			crd:      "package/crds/kubernetes.m.crossplane.io_objects.yaml",
			resource: schema.GroupResource{Group: "kubernetes.m.crossplane.io", Resource: "objects"},
			kind:     "Object.kubernetes.m.crossplane.io",
			// managementPolicies is not set: the CRD defaults it to ["*"].
			object: map[string]any{
				"apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
				"kind":       "Object",
				"metadata": map[string]any{
					"name":        "shop-config",
					"namespace":   "default",
					"annotations": map[string]any{"crossplane.io/external-name": "shop-config"},
				},
				"spec": map[string]any{
					"forProvider": map[string]any{
						"manifest": map[string]any{
							"apiVersion": "v1",
							"kind":       "ConfigMap",
							"metadata":   map[string]any{"name": "shop-config", "namespace": "shop"},
							"data":       map[string]any{"color": "blue"},
						},
					},
					"providerConfigRef": map[string]any{"kind": "ProviderConfig", "name": "in-cluster"},
				},
			},
			held: []heldField{{path: []string{"spec", "managementPolicies"}, value: []any{"Observe"}}},
		},
	}
}

// TestShippedHoldsOnRealCRDs: each shipped rule of policies/hold.rego but
// the Flux Kustomization's and the CronJob's holds an object of its kind
// under the real CRD of the project that defines it, taken from the pinned
// module (hack/tools/crds), not a copy, or generated from the module's API
// types as the project generates it (the HelmRelease's). The API server
// accepts the hold patch and keeps the held field (a CRD that does not know
// it would prune it), and the release gives back the object's spec, labels
// and annotations exactly as they were. No actuator runs: what is tried is
// the patch against the schema, and the rule's quiet on an object no
// actuator has written a status to.
func TestShippedHoldsOnRealCRDs(t *testing.T) {
	cluster.RequireTools(t, append(cluster.ControlPlaneBinaries, "controller-gen")...)
	start := time.Now()
	since := func() string { return time.Since(start).Round(100 * time.Millisecond).String() }
	kinds := shippedKinds()
	crds := realCRDs(t, kinds)
	cp := cluster.StartForTest(t, cluster.Options{Name: "crds", CRDs: crds})
	t.Logf("%s: control plane up with %d CRDs", since(), len(crds))
	f := enginetest.NewSwitch(t, active)
	resources := make([]schema.GroupResource, 0, len(kinds))
	for _, k := range kinds {
		resources = append(resources, k.resource)
	}
	holder := startHolder(t, cp, f, resources...)
	ctx := context.Background()

	// Active: every object is created as its users write it (refused if
	// the CRD does not know a field of it) and, once the hold controller
	// decided it, read back as the API server keeps it (with the CRD's
	// defaults): that is what the release must give back.
	objs := make([]*unstructured.Unstructured, len(kinds))
	before := make([]*unstructured.Unstructured, len(kinds))
	for i, k := range kinds {
		objs[i] = &unstructured.Unstructured{Object: runtime.DeepCopyJSON(k.object)}
		if err := cp.Client.Create(ctx, objs[i], client.FieldValidation("Strict")); err != nil {
			t.Fatalf("%s: create %s under its real CRD: %v", k.rule, objs[i].GetKind(), err)
		}
	}
	waitCRDs(t, "every object decided and none held while the cluster holds the fence", func() (bool, string) {
		p := holder.Progress("default")
		for _, k := range kinds {
			kp, ok := kindProgress(p, k.kind)
			if !ok || kp.Total != 1 || kp.Held != 0 {
				return false, fmt.Sprintf("%s: %+v (found %v)", k.kind, kp, ok)
			}
		}
		return true, ""
	})
	for i, k := range kinds {
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(objs[i]), objs[i]); err != nil {
			t.Fatal(err)
		}
		if _, ok := objs[i].GetAnnotations()[hold.RecordAnnotation]; ok {
			t.Fatalf("%s: the object carries a hold record while the cluster holds the fence: %v", k.rule, objs[i].GetAnnotations())
		}
		before[i] = objs[i].DeepCopy()
	}
	t.Logf("%s: %d objects created, none held", since(), len(kinds))

	// Fenced: each is held, with its held fields as the rule sets them and
	// nothing else changed but the record.
	f.Set(t, fenced)
	fencedAt := time.Now()
	t.Run("held", func(t *testing.T) {
		for i, k := range kinds {
			t.Run(k.rule, func(t *testing.T) {
				o := objs[i]
				waitObject(t, cp.Client, o, "the hold recorded", func(o *unstructured.Unstructured) bool {
					_, ok := o.GetAnnotations()[hold.RecordAnnotation]
					return ok
				})
				want := before[i].DeepCopy()
				for _, h := range k.held {
					got, found, err := unstructured.NestedFieldNoCopy(o.Object, h.path...)
					switch {
					case err != nil || !found:
						t.Errorf("%s is absent from the held object (found %v, %v): the API server pruned it, the CRD (%s) does not know the field the rule holds by",
							fieldName(h.path), found, err, k.crd)
					case !reflect.DeepEqual(got, h.value):
						t.Errorf("%s is %#v on the held object, want %#v", fieldName(h.path), got, h.value)
					}
					if err := unstructured.SetNestedField(want.Object, runtime.DeepCopyJSONValue(h.value), h.path...); err != nil {
						t.Fatal(err)
					}
				}
				got := o.DeepCopy()
				unstructured.RemoveNestedField(got.Object, "metadata", "annotations", hold.RecordAnnotation)
				if len(got.GetAnnotations()) == 0 {
					// The record was its only annotation.
					unstructured.RemoveNestedField(got.Object, "metadata", "annotations")
				}
				if d := cmp.Diff(restoredParts(want), restoredParts(got)); d != "" {
					t.Errorf("holding changed more than the held fields and the record (-want +got):\n%s", d)
				}
			})
		}
	})
	waitCRDs(t, "every object held in the hold controller's progress, quiet where nothing reports activity", func() (bool, string) {
		p := holder.Progress("default")
		for _, k := range kinds {
			kp, ok := kindProgress(p, k.kind)
			quiet := 1
			if k.activity != "" {
				quiet = 0
			}
			if !ok || kp.Total != 1 || kp.Held != 1 || kp.Quiet != quiet {
				return false, fmt.Sprintf("%s: %+v (found %v), want 1 held, %d quiet", k.kind, kp, ok, quiet)
			}
			if k.activity != "" && !slices.ContainsFunc(kp.Activity, func(a string) bool { return strings.Contains(a, k.activity) }) {
				return false, fmt.Sprintf("%s: activity %q, want %q", k.kind, kp.Activity, k.activity)
			}
		}
		return true, ""
	})
	t.Logf("%s: all held, and quiet where expected, %s after the fence was set to fenced", since(), time.Since(fencedAt).Round(100*time.Millisecond))

	// Active again: each is released, exactly as it was.
	f.Set(t, active)
	releasedAt := time.Now()
	t.Run("released", func(t *testing.T) {
		for i, k := range kinds {
			t.Run(k.rule, func(t *testing.T) {
				o := objs[i]
				waitObject(t, cp.Client, o, "the hold record gone", func(o *unstructured.Unstructured) bool {
					_, ok := o.GetAnnotations()[hold.RecordAnnotation]
					return !ok
				})
				want, got := restoredParts(before[i]), restoredParts(o)
				if !reflect.DeepEqual(want, got) {
					t.Errorf("released object differs from before the hold (-before +after):\n%s", cmp.Diff(want, got))
				}
				wantJSON, err := json.Marshal(want)
				if err != nil {
					t.Fatal(err)
				}
				gotJSON, err := json.Marshal(got)
				if err != nil {
					t.Fatal(err)
				}
				if string(wantJSON) != string(gotJSON) {
					t.Errorf("released object's JSON differs from before the hold:\nbefore %s\nafter  %s", wantJSON, gotJSON)
				}
			})
		}
	})
	waitCRDs(t, "no object held in the hold controller's progress", func() (bool, string) {
		p := holder.Progress("default")
		for _, k := range kinds {
			if kp, ok := kindProgress(p, k.kind); !ok || kp.Total != 1 || kp.Held != 0 {
				return false, fmt.Sprintf("%s: %+v (found %v)", k.kind, kp, ok)
			}
		}
		return true, ""
	})
	t.Logf("%s: all released exactly, %s after the fence was set to active", since(), time.Since(releasedAt).Round(100*time.Millisecond))
}

// realCRDs returns the CRD files of kinds, from the modules at the versions
// hack/tools/crds pins, downloaded into (or found in) the module cache, or
// generated from them with controller-gen (in the test assets, beside
// kube-apiserver: hack/build-tools.sh controller-gen).
func realCRDs(t testing.TB, kinds []realKind) []string {
	t.Helper()
	ctx := context.Background()
	tools, err := pinned.ToolsModule("crds")
	if err != nil {
		t.Fatal(err)
	}
	var modules []string
	for _, k := range kinds {
		if !slices.Contains(modules, k.module) {
			modules = append(modules, k.module)
		}
	}
	downloaded, err := pinned.Download(ctx, tools, modules...)
	if err != nil {
		t.Fatal(err)
	}
	generated := map[string]string{}
	var crds []string
	for _, k := range kinds {
		m, ok := downloaded[k.module]
		if !ok {
			t.Fatalf("%s: hack/tools/crds does not pin %s", k.rule, k.module)
		}
		dir := m.Dir
		if k.generated {
			if dir, ok = generated[k.module]; !ok {
				dir = generateCRDs(t, m)
				generated[k.module] = dir
			}
		}
		crd := filepath.Join(dir, filepath.FromSlash(k.crd))
		if _, err := os.Stat(crd); err != nil {
			t.Fatalf("%s: the CRD of %s@%s: %v", k.rule, m.Path, m.Version, err)
		}
		if k.generated {
			t.Logf("%s: %s generated from %s@%s", k.rule, k.crd, m.Path, m.Version)
		} else {
			t.Logf("%s: %s of %s@%s", k.rule, k.crd, m.Path, m.Version)
		}
		crds = append(crds, crd)
	}
	return crds
}

// generateCRDs generates the CRDs of module m's API types with the
// controller-gen of the test assets, into a directory of the test.
func generateCRDs(t testing.TB, m pinned.Module) string {
	t.Helper()
	controllerGen := cluster.RequireTool(t, "controller-gen")
	dir := t.TempDir()
	start := time.Now()
	if err := pinned.GenerateCRDs(context.Background(), controllerGen, m, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("generated the CRDs of %s@%s in %s", m.Path, m.Version, time.Since(start).Round(10*time.Millisecond))
	return dir
}

// TestHelmReleaseCRDIsKustomizeControllersFlux: the helm-controller API
// module whose HelmRelease CRD TestShippedHoldsOnRealCRDs generates
// (hack/tools/crds) is of the Flux release of the kustomize-controller that
// TestRealFluxIsHeld runs (hack/tools/flux): both require the same Flux
// meta API. Flux releases its controllers together, so a kustomize-controller
// raised alone shows here.
func TestHelmReleaseCRDIsKustomizeControllersFlux(t *testing.T) {
	cluster.SkipShort(t, "go mod download of hack/tools/crds' and hack/tools/flux's modules")
	const meta = "github.com/fluxcd/pkg/apis/meta"
	type pin struct{ tools, module, version, meta string }
	helm := &pin{tools: "crds", module: "github.com/fluxcd/helm-controller/api"}
	kustomize := &pin{tools: "flux", module: "github.com/fluxcd/kustomize-controller"}
	for _, p := range []*pin{helm, kustomize} {
		dir, err := pinned.ToolsModule(p.tools)
		if err != nil {
			t.Fatal(err)
		}
		downloaded, err := pinned.Download(context.Background(), dir, p.module)
		if err != nil {
			t.Fatal(err)
		}
		m := downloaded[p.module]
		if p.meta, err = pinned.Requirement(m, meta); err != nil {
			t.Fatal(err)
		}
		if p.meta == "" {
			t.Fatalf("%s@%s (hack/tools/%s) does not require %s", m.Path, m.Version, p.tools, meta)
		}
		p.version = m.Version
		t.Logf("%s@%s (hack/tools/%s) requires %s %s", m.Path, m.Version, p.tools, meta, p.meta)
	}
	if helm.meta != kustomize.meta {
		t.Errorf("helm-controller/api %s (hack/tools/crds) requires %s %s, kustomize-controller %s (hack/tools/flux) %s: pin the helm-controller API module released with that kustomize-controller",
			helm.version, meta, helm.meta, kustomize.version, kustomize.meta)
	}
}

// restoredParts are the parts of an object that a release gives back: its
// spec, labels and annotations, each only where the object has it.
func restoredParts(o *unstructured.Unstructured) map[string]any {
	parts := map[string]any{}
	for _, path := range [][]string{{"spec"}, {"metadata", "labels"}, {"metadata", "annotations"}} {
		if v, ok, _ := unstructured.NestedFieldCopy(o.Object, path...); ok {
			parts[strings.Join(path, ".")] = v
		}
	}
	return parts
}

// fieldName renders a field path as the policy's messages do.
func fieldName(path []string) string {
	var b strings.Builder
	for _, s := range path {
		if strings.ContainsAny(s, "./") {
			fmt.Fprintf(&b, "[%q]", s)
			continue
		}
		b.WriteString("." + s)
	}
	return strings.TrimPrefix(b.String(), ".")
}

// waitObject polls o until ok holds, failing the test with the object's
// last state if it does not within 30 s.
func waitObject(t *testing.T, c client.Client, o *unstructured.Unstructured, what string, ok func(*unstructured.Unstructured) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return false, nil
		}
		return ok(o), nil
	})
	if err != nil {
		state, _ := json.Marshal(restoredParts(o))
		t.Fatalf("waiting for %s of %s %s: %v\nlast read: %s", what, o.GetKind(), client.ObjectKeyFromObject(o), err, state)
	}
}

// waitCRDs polls ok until it holds, failing the test with what it last
// reported if it does not within 30 s.
func waitCRDs(t *testing.T, what string, ok func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		done, state := ok()
		last = state
		return done, nil
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v\nlast: %s", what, err, last)
	}
}
