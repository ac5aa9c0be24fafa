package enginetest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/policies"
)

// CopyPolicies writes the shipped policies, without their Rego tests, into a
// new temporary directory and returns it: a policy directory for tests to
// edit, as an operator edits the chart's ConfigMap.
func CopyPolicies(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	modules, err := policies.Shipped()
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range modules {
		if err := os.WriteFile(filepath.Join(dir, name), src, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// StampedToken is the fencing token an admitted request ends up with: the
// one the mutation's patch adds, or else existing, the token its object
// already carried; 0 when neither is a token.
func StampedToken(patch []engine.PatchOperation, existing string) uint64 {
	value := existing
	for _, op := range patch {
		switch {
		case op.Op == "add" && op.Path == "/metadata/annotations/fencegate.dev~1token":
			value, _ = op.Value.(string)
		case op.Op == "add" && op.Path == "/metadata/annotations":
			if m, ok := op.Value.(map[string]any); ok {
				value, _ = m["fencegate.dev/token"].(string)
			}
		}
	}
	token, _ := strconv.ParseUint(value, 10, 64)
	return token
}

// Token is the fencing token of the states Fence builds.
const Token = 1042

// Fence returns a fence state of domain "default" in which this cluster
// (cluster@epoch) has the given status and holder@holderEpoch holds the
// fence; an empty holder means none is known. Active states carry no
// validity bound (valid_until_ns 0).
func Fence(status fencestate.Status, cluster string, epoch uint64, holder string, holderEpoch uint64) fencestate.State {
	s := fencestate.State{
		Status:  status,
		Domain:  "default",
		Cluster: fencestate.Cluster{Name: cluster, UID: cluster + "-uid", Epoch: epoch},
		Token:   Token,
	}
	if holder != "" {
		s.Holder = fencestate.Cluster{Name: holder, UID: holder + "-uid", Epoch: holderEpoch}
	}
	return s
}

// Component returns a Component object (JSON) with the given annotations
// (none: no annotations map at all).
func Component(name, namespace string, annotations map[string]string) []byte {
	meta := map[string]any{"name": name, "namespace": namespace}
	if annotations != nil {
		meta["annotations"] = annotations
	}
	return mustJSON(map[string]any{
		"apiVersion": "components.fencegate.dev/v1alpha1",
		"kind":       "Component",
		"metadata":   meta,
		"spec": map[string]any{
			"enabled": true,
			"chart":   map[string]any{"repository": "https://charts.example.com", "name": name, "version": "1.4.2"},
			"values":  map[string]any{"replicas": 3},
		},
	})
}

// Review builds an AdmissionReview body, failing the test if it cannot.
func Review(t testing.TB, r engine.ReviewRequest) []byte {
	t.Helper()
	body, err := engine.BuildReview(r)
	if err != nil {
		t.Fatalf("build AdmissionReview: %v", err)
	}
	return body
}

// LargeUpdate returns a realistic UPDATE of a Component of about 6 KB: the
// object and the old object each carry labels, annotations (among them
// kubectl's last-applied configuration and the fence stamps), managedFields
// of three managers, a spec with nested chart values and a status.
func LargeUpdate(t testing.TB) []byte {
	t.Helper()
	return Review(t, engine.ReviewRequest{
		UID:       "705ab4f5-6393-11e8-b7cc-42010a800002",
		Operation: "UPDATE",
		Object:    largeComponent(3, "1.5.0"),
		OldObject: largeComponent(2, "1.4.2"),
		Username:  "system:serviceaccount:ci:deployer",
		Groups:    []string{"system:serviceaccounts", "system:serviceaccounts:ci", "system:authenticated"},
	})
}

func largeComponent(replicas int, version string) []byte {
	values := map[string]any{
		"replicas":  replicas,
		"image":     map[string]any{"repository": "registry.example.com/payments/billing", "tag": version, "pullPolicy": "IfNotPresent"},
		"resources": map[string]any{"requests": map[string]any{"cpu": "250m", "memory": "256Mi"}},
	}
	var env []map[string]any
	for i := range 3 {
		env = append(env, map[string]any{"name": fmt.Sprintf("BILLING_SETTING_%d", i), "value": fmt.Sprintf("value-%d", i)})
	}
	values["env"] = env
	spec := map[string]any{
		"enabled": true,
		"chart":   map[string]any{"repository": "https://charts.example.com/payments", "name": "billing", "version": version},
		"values":  values,
	}
	lastApplied := mustJSON(map[string]any{
		"apiVersion": "components.fencegate.dev/v1alpha1",
		"kind":       "Component",
		"metadata":   map[string]any{"name": "billing", "namespace": "payments", "labels": map[string]any{"app.kubernetes.io/name": "billing"}},
		"spec":       spec,
	})
	fieldsV1 := map[string]any{
		"f:metadata": map[string]any{
			"f:annotations": map[string]any{".": map[string]any{}, "f:kubectl.kubernetes.io/last-applied-configuration": map[string]any{}},
			"f:labels": map[string]any{".": map[string]any{}, "f:app.kubernetes.io/name": map[string]any{},
				"f:app.kubernetes.io/part-of": map[string]any{}, "f:team": map[string]any{}},
		},
		"f:spec": map[string]any{
			".": map[string]any{}, "f:enabled": map[string]any{},
			"f:chart":  map[string]any{".": map[string]any{}, "f:name": map[string]any{}, "f:repository": map[string]any{}, "f:version": map[string]any{}},
			"f:values": map[string]any{},
		},
	}
	return mustJSON(map[string]any{
		"apiVersion": "components.fencegate.dev/v1alpha1",
		"kind":       "Component",
		"metadata": map[string]any{
			"name":              "billing",
			"namespace":         "payments",
			"uid":               "4f8c2a52-0c55-4b7e-9a6a-3b3f4f0e7c11",
			"resourceVersion":   "184467",
			"generation":        replicas,
			"creationTimestamp": "2026-01-12T09:41:07Z",
			"labels": map[string]any{
				"app.kubernetes.io/name":    "billing",
				"app.kubernetes.io/part-of": "payments",
				"team":                      "payments-core",
			},
			"annotations": map[string]any{
				"kubectl.kubernetes.io/last-applied-configuration": string(lastApplied) + "\n",
				"fencegate.dev/epoch":                              "7",
				"fencegate.dev/token":                              "1041",
				"payments.example.com/owner":                       "billing-team@example.com",
			},
			"managedFields": []any{
				map[string]any{"manager": "kubectl-client-side-apply", "operation": "Update", "apiVersion": "components.fencegate.dev/v1alpha1",
					"time": "2026-01-12T09:41:07Z", "fieldsType": "FieldsV1", "fieldsV1": fieldsV1},
				map[string]any{"manager": "fencegate", "operation": "Update", "apiVersion": "components.fencegate.dev/v1alpha1",
					"time": "2026-01-12T09:41:08Z", "fieldsType": "FieldsV1", "subresource": "status",
					"fieldsV1": map[string]any{"f:status": map[string]any{".": map[string]any{}, "f:conditions": map[string]any{}, "f:fence": map[string]any{}, "f:observedGeneration": map[string]any{}}}},
			},
		},
		"spec": spec,
		"status": map[string]any{
			"observedGeneration": replicas - 1,
			"conditions": []any{
				map[string]any{"type": "SourceConflict", "status": "False", "reason": "FenceHeld", "lastTransitionTime": "2026-01-12T09:41:08Z", "observedGeneration": replicas - 1},
				map[string]any{"type": "Ready", "status": "True", "reason": "Deployed", "lastTransitionTime": "2026-01-12T09:41:30Z", "observedGeneration": replicas - 1},
			},
			"fence": map[string]any{"state": "active", "epoch": 7, "holder": "east@7", "token": 1041, "since": "2026-01-12T09:41:08Z"},
		},
	})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("enginetest: encode fixture: %v", err))
	}
	return b
}

// Reloads is the value of fencegate_policy_reloads_total{result} in g.
func Reloads(t testing.TB, g prometheus.Gatherer, result string) float64 {
	t.Helper()
	return Counter(t, g, "fencegate_policy_reloads_total", map[string]string{"result": result})
}

// Counter is the value of the counter name in g whose labels include
// labels, failing the test when g has no such series.
func Counter(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			matched := 0
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v == l.GetValue() {
					matched++
				}
			}
			if matched == len(labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}
