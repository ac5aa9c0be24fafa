package cluster

import (
	"testing"

	"github.com/go-logr/logr/testr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// ManagerOptions are the options of a test's controller manager: logging
// to tb, scheme, no metrics or health endpoints, and controller names that
// need not be unique in the process (each test, and each run of go test
// -count, makes a manager of its own with the same controllers). Callers
// add what their test needs, a cache's options say.
func ManagerOptions(tb testing.TB, scheme *runtime.Scheme) ctrl.Options {
	return ctrl.Options{
		Logger:                 testr.NewWithInterface(tb, testr.Options{}),
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	}
}
