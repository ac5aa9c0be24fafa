// Command helm-actuator is fencegate's reference actuator, and the gate's
// first user: it installs each Component's chart (spec.chart, spec.values)
// with the Helm SDK and publishes the release's Services as status.access,
// only while its cluster holds the Component's fence domain. On a fenced
// cluster it installs, upgrades and uninstalls nothing; a Component
// deleted there loses only this cluster's copy of its release; on each
// transition every Component is reconciled again, so that the new holder
// installs at once.
//
// Every flag can be set from FENCEGATE_HELM_ACTUATOR_<FLAG> (dashes as
// underscores); the command line wins.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// envPrefix starts the environment variable of each flag.
const envPrefix = "FENCEGATE_HELM_ACTUATOR_"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "helm-actuator:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("helm-actuator", flag.ContinueOnError)
	var opts Options
	fs.StringVar(&opts.FencegateNamespace, "fencegate-namespace", "fencegate", "the namespace fencegate runs in")
	fs.IntVar(&opts.Concurrency, "concurrency", 4, "how many Components are reconciled at once")
	metrics := fs.String("metrics-bind-address", ":8080", `where /metrics is served; "0" serves none`)
	probes := fs.String("health-probe-bind-address", ":8081", `where /healthz and /readyz are served; "0" serves none`)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := fromEnvironment(fs); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := fencegatev1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	config, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(config, ctrl.Options{Scheme: scheme, Metrics: metricsserver.Options{BindAddress: *metrics}, HealthProbeBindAddress: *probes})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := Setup(mgr, opts); err != nil {
		return err
	}
	return mgr.Start(ctrl.SetupSignalHandler())
}

// fromEnvironment sets each flag not given on the command line from its
// environment variable.
func fromEnvironment(fs *flag.FlagSet) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := envPrefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		value, ok := os.LookupEnv(name)
		if err != nil || given[f.Name] || !ok {
			return
		}
		if setErr := f.Value.Set(value); setErr != nil {
			err = fmt.Errorf("environment variable %s=%q (for -%s): %w", name, value, f.Name, setErr)
		}
	})
	return err
}
