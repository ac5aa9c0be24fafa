package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/test/cluster"
)

const componentYAML = `apiVersion: components.fencegate.dev/v1alpha1
kind: Component
metadata:
  name: billing
  namespace: default
spec:
  enabled: true
  chart:
    repository: https://charts.example.com
    name: billing
    version: 1.4.2
  values:
    replicas: 3
`

// TestComponentResource checks the CRD on a real API server, through both the
// Go client and the real kubectl.
func TestComponentResource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "east"})

	t.Run("kube-system namespace UID is the cluster identity", func(t *testing.T) {
		uid, err := cp.KubeSystemUID(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := uuid.Parse(uid); err != nil {
			t.Errorf("kube-system UID %q is not a UUID: %v", uid, err)
		}
	})

	t.Run("Go client creates, gets and lists", func(t *testing.T) {
		comp := &fencegatev1alpha1.Component{
			ObjectMeta: metav1.ObjectMeta{Name: "payments", Namespace: "default"},
			Spec: fencegatev1alpha1.ComponentSpec{
				Enabled: true,
				Chart:   fencegatev1alpha1.ChartRef{Name: "payments", Version: "2.0.0"},
				Values:  &apiextensionsv1.JSON{Raw: []byte(`{"replicas":2,"tier":{"name":"gold"}}`)},
			},
		}
		if err := cp.Client.Create(ctx, comp); err != nil {
			t.Fatalf("create: %v", err)
		}
		var got fencegatev1alpha1.Component
		if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(comp), &got); err != nil {
			t.Fatalf("get: %v", err)
		}
		if got.Spec.Chart.Version != "2.0.0" || string(got.Spec.Values.Raw) != `{"replicas":2,"tier":{"name":"gold"}}` {
			t.Errorf("spec round trip: got %+v values %s", got.Spec, got.Spec.Values.Raw)
		}

		got.Status.Fence = &fencegatev1alpha1.FenceStatus{State: "active", Epoch: 7, Holder: "east@7", Token: 42}
		got.Status.Conditions = []metav1.Condition{{
			Type: fencegatev1alpha1.ConditionSourceConflict, Status: metav1.ConditionFalse,
			Reason: fencegatev1alpha1.ReasonFenceHeld, Message: "this cluster holds the fence", LastTransitionTime: metav1.Now(),
		}}
		if err := cp.Client.Status().Update(ctx, &got); err != nil {
			t.Fatalf("status update: %v", err)
		}

		var list fencegatev1alpha1.ComponentList
		if err := cp.Client.List(ctx, &list, client.InNamespace("default")); err != nil {
			t.Fatalf("list: %v", err)
		}
		if len(list.Items) != 1 || list.Items[0].Status.Fence == nil || list.Items[0].Status.Fence.Token != 42 {
			t.Errorf("list = %+v, want payments with status.fence.token 42", list.Items)
		}
	})

	t.Run("kubectl applies, gets and prints the columns", func(t *testing.T) {
		res, err := cp.Kubectl(ctx, []byte(componentYAML), "apply", "-f", "-")
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("kubectl apply: %v exit %d: %s", err, res.ExitCode, res.Stderr)
		}
		if !strings.Contains(res.Stdout, "component.components.fencegate.dev/billing created") {
			t.Errorf("kubectl apply printed %q", res.Stdout)
		}

		res, err = cp.Kubectl(ctx, nil, "get", "components", "-n", "default")
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("kubectl get: %v exit %d: %s", err, res.ExitCode, res.Stderr)
		}
		lines := strings.Split(strings.TrimSpace(res.Stdout), "\n")
		if got, want := strings.Fields(lines[0]), []string{"NAME", "READY", "FENCED", "EPOCH", "HOLDER", "AGE"}; strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("columns = %v, want %v", got, want)
		}
		rows := parseTable(lines)
		if len(rows) != 2 {
			t.Fatalf("kubectl get listed %d components, want 2:\n%s", len(rows), res.Stdout)
		}
		// payments has a fence status; billing has none yet.
		wantRows := map[string]map[string]string{
			"payments": {"READY": "", "FENCED": "False", "EPOCH": "7", "HOLDER": "east@7"},
			"billing":  {"READY": "", "FENCED": "", "EPOCH": "", "HOLDER": ""},
		}
		for name, want := range wantRows {
			for column, value := range want {
				if got := rows[name][column]; got != value {
					t.Errorf("%s: column %s = %q, want %q\n%s", name, column, got, value, res.Stdout)
				}
			}
		}

		res, err = cp.Kubectl(ctx, nil, "get", "comp", "billing", "-n", "default", "-o", "jsonpath={.spec.chart.version}")
		if err != nil || res.ExitCode != 0 || res.Stdout != "1.4.2" {
			t.Errorf("kubectl get billing chart version = %q (exit %d, %v): %s", res.Stdout, res.ExitCode, err, res.Stderr)
		}
	})
}

// parseTable reads kubectl's table output into rows keyed by NAME, each a
// map of column to cell. Columns are cut at the header's offsets because
// empty cells are printed as blanks.
func parseTable(lines []string) map[string]map[string]string {
	header := lines[0]
	type column struct {
		name  string
		start int
	}
	var columns []column
	for i := 0; i < len(header); {
		if header[i] == ' ' {
			i++
			continue
		}
		end := strings.IndexByte(header[i:], ' ')
		if end < 0 {
			end = len(header) - i
		}
		columns = append(columns, column{header[i : i+end], i})
		i += end
	}
	rows := map[string]map[string]string{}
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, c := range columns {
			end := len(line)
			if i+1 < len(columns) && columns[i+1].start < end {
				end = columns[i+1].start
			}
			if c.start < end {
				row[c.name] = strings.TrimSpace(line[c.start:end])
			}
		}
		rows[row["NAME"]] = row
	}
	return rows
}
