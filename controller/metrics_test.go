package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/apimachinery/pkg/util/wait"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

func find(t *testing.T, reg *prometheus.Registry, name string) []*dto.Metric {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

// single is the one series of an unlabelled metric.
func single(t *testing.T, reg *prometheus.Registry, name string) *dto.Metric {
	t.Helper()
	metrics := find(t, reg, name)
	if len(metrics) != 1 {
		t.Fatalf("metric %s: found %d series, want 1", name, len(metrics))
	}
	return metrics[0]
}

// gauge is the value of an unlabelled gauge.
func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return single(t, reg, name).GetGauge().GetValue()
}

// counter is the value of an unlabelled counter.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return single(t, reg, name).GetCounter().GetValue()
}

// reconciles is the number of reconciles of the Component controller so
// far, whatever their result, as controller-runtime counts them. The
// counter is the process's, shared by every test: callers compare values.
func reconciles(t testing.TB) float64 {
	t.Helper()
	return processMetric(t, "controller_runtime_reconcile_total", "controller", "component")
}

// writeRequests is the number of PATCH, PUT and POST requests this process
// sent to API servers so far, as client-go counts them.
func writeRequests(t *testing.T) float64 {
	t.Helper()
	var total float64
	for _, method := range []string{"PATCH", "PUT", "POST"} {
		total += processMetric(t, "rest_client_requests_total", "method", method)
	}
	return total
}

// processMetric sums the series of the counter or gauge name in
// controller-runtime's registry (the process's) whose label has value.
func processMetric(t testing.TB, name, label, value string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return total
}

func waitReconciles(t testing.TB, ctx context.Context, atLeast float64) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return reconciles(t) >= atLeast, nil
	})
	if err != nil {
		t.Fatalf("waiting for %v reconciles (have %v): %v", atLeast, reconciles(t), err)
	}
}
