package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/controller"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/engine"
	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/fenceobject"
	"github.com/fencegate/fencegate/fenceobject/membership"
	"github.com/fencegate/fencegate/fencestate"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/internal/cli"
	"github.com/fencegate/fencegate/internal/envflag"
	"github.com/fencegate/fencegate/internal/runnable"
	"github.com/fencegate/fencegate/internal/webhookcerts"
	"github.com/fencegate/fencegate/webhook"
)

// Ways the webhook gets its serving certificate.
const (
	// webhookCertsSelfSigned: fencegate creates a CA and a serving
	// certificate, keeps them in a Secret, injects the CA into the webhook
	// configurations and rotates both before they expire.
	webhookCertsSelfSigned = "self-signed"
	// webhookCertsExternal: someone else (cert-manager, an operator) puts
	// tls.crt and tls.key into --webhook-cert-dir and the CA bundle into the
	// webhook configurations.
	webhookCertsExternal = "external"
)

// runOptions are the flags of `fencegate run`.
type runOptions struct {
	clusterName string
	epoch       uint64
	domain      string
	domains     []string
	clusterUID  string
	instance    string
	authority   authorityClientOptions

	declareInterval time.Duration
	declareTimeout  time.Duration
	leaseMargin     time.Duration
	takeoverGrace   time.Duration
	handoverQuiet   time.Duration
	instanceLease   time.Duration

	kubeconfig string
	kubeQPS    float32
	kubeBurst  int

	webhookAddress     string
	webhookCertDir     string
	webhookCerts       string
	webhookSecretName  string
	webhookServiceName string
	webhookHosts       []string
	validatingWebhook  string
	mutatingWebhook    string
	namespace          string

	policyDir  string
	configFile string

	holdKinds    []string
	holdQuietFor time.Duration

	metricsAddress string
	healthAddress  string
	pprofAddress   string

	leaderElect             bool
	leaderElectionNamespace string
	leaderElectionID        string
	shutdownTimeout         time.Duration

	// logMetrics counts the log lines that sampling did not write.
	logMetrics prometheus.Collector
}

func newRunCommand(logs *cli.LogOptions) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run this cluster's fencegate: fence agent, admission webhook and Component controller",
		Long: `Run declares this cluster's name, identity and epoch to the fence authority,
keeps the answer in the policy engine as data.fence, answers admission requests
for Components from the Rego policies, and writes each Component's fence
conditions. It keeps the Fence object of its domain (kubectl get fences), and
declares the Fence's spec.epoch when it is above --epoch: fail over by raising
spec.epoch on the standby above the active's epoch (fencegate failover).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(); err != nil {
				return err
			}
			logger, err := logs.Logger(cmd)
			if err != nil {
				return err
			}
			o.logMetrics = logs.Metrics()
			return o.run(cmd.Context(), logger)
		},
	}
	o.addFlags(cmd.Flags())
	return cmd
}

func (o *runOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.clusterName, "cluster-name", "", "this cluster's name, a DNS label (required)")
	fs.Uint64Var(&o.epoch, "epoch", 0, "this cluster's epoch, at least 1; raise it above the active cluster's to fail over (required)")
	fs.StringVar(&o.domain, "domain", fenceagent.DefaultDomain, "the fence's domain: clusters fence each other within one domain; the domain of Components that neither they nor their namespace label "+domain.Label)
	fs.StringSliceVar(&o.domains, "domains", nil, fmt.Sprintf("further fence domains this cluster serves beside --domain, each with an agent and a Fence of its own, for the Components that they or their namespace label %s (at most %d domains in all)", domain.Label, domain.MaxServed))
	fs.StringVar(&o.clusterUID, "cluster-uid", "", "this cluster's identity, overriding the UID of its kube-system Namespace")
	fs.StringVar(&o.instance, "instance", "", "this process's name within its cluster, e.g. the pod name: each instance holds its own lease (default: the host name with a random suffix)")
	o.authority.addFlags(fs)

	fs.DurationVar(&o.declareInterval, "declare-interval", fenceagent.DefaultDeclareInterval, "time between two declarations to the authority (jittered)")
	fs.DurationVar(&o.declareTimeout, "declare-timeout", fenceagent.DefaultDeclareTimeout, "timeout of each declaration")
	fs.DurationVar(&o.leaseMargin, "lease-margin", fenceagent.DefaultLeaseMargin, "how long before the authority's lease ends this cluster stops acting as holder without a renewal")
	fs.DurationVar(&o.takeoverGrace, "takeover-grace", fenceagent.DefaultTakeoverGrace, "how long, after a grant that followed the previous holder's lease expiry, this cluster keeps its actuators held, so that the holder cut off from the authority has suspended its own (0: none; see docs/design.md, Handover order)")
	fs.DurationVar(&o.handoverQuiet, "handover-quiet-wait", fenceobject.DefaultHandoverQuietWait, "how long a holder told to hand the fence over waits, once every held object is held, for them all to go quiet before it releases the fence (within its lease's validity)")
	fs.DurationVar(&o.instanceLease, "instance-lease-duration", membership.DefaultDuration, "how long this process's Lease in --namespace lasts without renewal: a process that is gone holds the Fence's Enforced condition back no longer (renewed every third of it)")

	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster (default: the in-cluster service account)")
	fs.Float32Var(&o.kubeQPS, "kube-api-qps", 200, "queries per second to the API server (a fence transition re-marks every Component); negative: no client-side limit, the API server's priority and fairness limits fencegate's requests (the chart's apiPriority installs a FlowSchema and a priority level for them); not 0")
	fs.IntVar(&o.kubeBurst, "kube-api-burst", 400, "burst of queries to the API server; ignored with a negative --kube-api-qps")

	fs.StringVar(&o.webhookAddress, "webhook-address", ":9443", "address the admission webhook serves HTTPS on")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "/run/fencegate/webhook-certs", "directory of the webhook's tls.crt and tls.key, re-read when they change")
	fs.StringVar(&o.webhookCerts, "webhook-certs", webhookCertsSelfSigned, "who provides the webhook certificate: self-signed (fencegate creates and rotates it) or external (cert-manager or you)")
	fs.StringVar(&o.webhookSecretName, "webhook-secret-name", "fencegate-webhook-tls", "Secret that keeps the self-signed CA and certificate")
	fs.StringVar(&o.webhookServiceName, "webhook-service-name", "", "Service in front of the webhook; the self-signed certificate names it")
	fs.StringSliceVar(&o.webhookHosts, "webhook-hosts", nil, "further DNS names or IPs for the self-signed certificate, for webhook configurations that call a URL")
	fs.StringVar(&o.validatingWebhook, "validating-webhook-configuration", "", "ValidatingWebhookConfiguration that gets the self-signed CA bundle")
	fs.StringVar(&o.mutatingWebhook, "mutating-webhook-configuration", "", "MutatingWebhookConfiguration that gets the self-signed CA bundle")
	fs.StringVar(&o.namespace, "namespace", "", "namespace fencegate runs in: each process's Lease, the leader election Lease and the self-signed certificate's Secret live there (required)")

	fs.StringVar(&o.policyDir, "policy-dir", "", "directory of Rego policies, hot-reloaded (default: the built-in policies)")
	fs.StringVar(&o.configFile, "config-file", "", "YAML or JSON file of data.fencegate.config (enforcement, exemptions), hot-reloaded")

	fs.StringSliceVar(&o.holdKinds, "hold-kinds", nil, "resources whose objects are held while this cluster does not hold their domain's fence, as resource.group (cronjobs.batch,kustomizations.kustomize.toolkit.fluxcd.io); the policies' data.fencegate.hold decides how")
	fs.DurationVar(&o.holdQuietFor, "hold-quiet-for", hold.DefaultQuietFor, "how long a held object's actuator must report nothing running before it counts as quiet (the Fence's Quiesced condition)")

	fs.StringVar(&o.metricsAddress, "metrics-address", ":8080", "address of the Prometheus /metrics endpoint (0 turns it off)")
	fs.StringVar(&o.healthAddress, "health-address", ":8081", "address of the /healthz and /readyz endpoints")
	fs.StringVar(&o.pprofAddress, "pprof-address", "", "address of Go's /debug/pprof/ profiles, for finding where CPU and memory go (default: off; serve it on loopback only)")

	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect one replica to run the controller; every replica serves the webhook")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: --namespace)")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "fencegate-controller", "name of the leader election Lease")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long to drain on SIGTERM")
}

// flagName names a flag and its environment variable, the way every error
// about a setting of run does.
func flagName(flag string) string {
	return fmt.Sprintf("--%s (%s)", flag, envflag.Name(flag))
}

// flagError names a flag and its environment variable.
func flagError(flag, format string, args ...any) error {
	return fmt.Errorf("%s: %s", flagName(flag), fmt.Sprintf(format, args...))
}

// agentSettingFlags are the flags that set the fence agent's settings.
var agentSettingFlags = map[fenceagent.Setting]string{
	fenceagent.SettingDomain:          "domain",
	fenceagent.SettingClusterName:     "cluster-name",
	fenceagent.SettingClusterUID:      "cluster-uid",
	fenceagent.SettingEpoch:           "epoch",
	fenceagent.SettingInstance:        "instance",
	fenceagent.SettingDeclareInterval: "declare-interval",
	fenceagent.SettingDeclareTimeout:  "declare-timeout",
	fenceagent.SettingLeaseMargin:     "lease-margin",
	fenceagent.SettingTakeoverGrace:   "takeover-grace",
}

// agentSettingName names a fence agent setting by its flag and variable; a
// setting that no flag of run sets is named as its Options field.
func agentSettingName(s fenceagent.Setting) string {
	if flag, ok := agentSettingFlags[s]; ok {
		return flagName(flag)
	}
	return "fence agent option " + string(s)
}

// agentSettingError is a problem with a fence agent setting, told in terms
// of run's flags.
type agentSettingError struct{ setting *fenceagent.SettingError }

func (e agentSettingError) Error() string { return e.setting.Describe(agentSettingName) }
func (e agentSettingError) Unwrap() error { return e.setting }

// agentOptions are the fence agent's settings as the flags give them. The
// cluster UID is --cluster-uid trimmed, as ResolveClusterUID takes it:
// empty when run is to read it from kube-system.
func (o *runOptions) agentOptions() fenceagent.Options {
	return fenceagent.Options{
		Domain:          o.domain,
		ClusterName:     o.clusterName,
		ClusterUID:      strings.TrimSpace(o.clusterUID),
		Epoch:           o.epoch,
		Instance:        o.instance,
		DeclareInterval: o.declareInterval,
		DeclareTimeout:  o.declareTimeout,
		LeaseMargin:     o.leaseMargin,
		TakeoverGrace:   o.takeoverGrace,
	}
}

// validate checks every flag and reports every problem at once, each naming
// the flag, its environment variable and what to do. It reads no file but
// the authority's TLS ones and reaches nothing: a new user's first run
// lists every setting to fix, the fence agent's among them.
func (o *runOptions) validate() error {
	var errs []error
	agent := o.agentOptions()
	var problems fenceagent.SettingErrors
	if err := agent.Validate(); err != nil && !errors.As(err, &problems) {
		errs = append(errs, err)
	}
	for _, p := range problems {
		// Without --cluster-uid the UID is read from kube-system once the
		// API server is reached.
		if p.Settings[0] == fenceagent.SettingClusterUID && agent.ClusterUID == "" {
			continue
		}
		errs = append(errs, agentSettingError{p})
	}
	if rpctypes.ValidateDomain(o.domain) == nil {
		// A bad --domain is the agent's problem above.
		if _, err := o.served(); err != nil {
			errs = append(errs, flagError("domains", "%v", err))
		}
	}
	if _, err := o.authority.tlsConfig(); err != nil {
		errs = append(errs, err)
	}
	if o.webhookCertDir == "" {
		errs = append(errs, flagError("webhook-cert-dir", "required: the webhook serves tls.crt and tls.key from it"))
	}
	if o.namespace == "" {
		errs = append(errs, flagError("namespace", "required: each fencegate process keeps a Lease there, which the Fence's Enforced condition counts, and so do the leader election and the self-signed certificate's Secret (the chart sets the release namespace)"))
	}
	switch o.webhookCerts {
	case webhookCertsExternal:
	case webhookCertsSelfSigned:
		if o.webhookServiceName == "" && len(o.webhookHosts) == 0 {
			errs = append(errs, flagError("webhook-service-name", "set it (or --webhook-hosts) with --webhook-certs=self-signed so the certificate names the webhook's address"))
		}
		if o.validatingWebhook == "" && o.mutatingWebhook == "" {
			errs = append(errs, flagError("validating-webhook-configuration", "set it and --mutating-webhook-configuration with --webhook-certs=self-signed, so the API server trusts the certificate"))
		}
		for _, name := range []string{o.webhookSecretName, o.validatingWebhook, o.mutatingWebhook} {
			if name == "" {
				continue
			}
			if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
				errs = append(errs, fmt.Errorf("%q is not a valid object name: %v", name, msgs))
			}
		}
	default:
		errs = append(errs, flagError("webhook-certs", "%q: want %s or %s", o.webhookCerts, webhookCertsSelfSigned, webhookCertsExternal))
	}
	if err := membership.CheckDuration(o.instanceLease); err != nil {
		errs = append(errs, flagError("instance-lease-duration", "%v", err))
	}
	if _, err := hold.ParseKinds(o.holdKinds); err != nil {
		errs = append(errs, flagError("hold-kinds", "%v", err))
	}
	if o.handoverQuiet <= 0 {
		errs = append(errs, flagError("handover-quiet-wait", "%v: want a positive duration", o.handoverQuiet))
	}
	if o.holdQuietFor <= 0 {
		errs = append(errs, flagError("hold-quiet-for", "%v: want a positive duration", o.holdQuietFor))
	}
	switch {
	case o.kubeQPS == 0 || math.IsNaN(float64(o.kubeQPS)):
		// client-go would take 0 for its default of 5 queries a second,
		// and NaN, which no comparison admits, for no limit at all.
		errs = append(errs, flagError("kube-api-qps", "%v: want a positive number of queries per second, or a negative one for no client-side limit (the API server's priority and fairness then limits fencegate's requests)", o.kubeQPS))
	case o.kubeQPS > 0 && o.kubeBurst <= 0:
		errs = append(errs, flagError("kube-api-burst", "%d: want a positive burst with a positive --kube-api-qps", o.kubeBurst))
	}
	if len(errs) > 0 {
		return fmt.Errorf("run cannot start:\n  %w", joinLines(errs))
	}
	return nil
}

// served are the fence domains served: --domain first, then --domains.
func (o *runOptions) served() ([]string, error) {
	return domain.Served(o.domain, o.domains)
}

// joinLines joins errors one per indented line.
func joinLines(errs []error) error {
	msg := ""
	for i, err := range errs {
		if i > 0 {
			msg += "\n  "
		}
		msg += err.Error()
	}
	return errors.New(msg)
}

// restConfig reaches the cluster through --kubeconfig, or in-cluster.
func (o *runOptions) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig); err != nil {
			return nil, flagError("kubeconfig", "%v", err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		return nil, fmt.Errorf("not running in a cluster and no --kubeconfig (%s) given: %w", envflag.Name("kubeconfig"), err)
	}
	// With a negative QPS none of fencegate's clients limits its requests:
	// client-go's RESTClientFor and its variants (rest/config.go) make a
	// token-bucket rate limiter only when QPS > 0, once a QPS of 0 has
	// become DefaultQPS (5). The burst then goes unused, and the API
	// server's priority and fairness alone paces the re-marking of every
	// Component after a fence transition.
	cfg.QPS, cfg.Burst = o.kubeQPS, o.kubeBurst
	cfg.UserAgent = "fencegate/" + version
	return cfg, nil
}

// run wires fencegate together and runs it until ctx ends: the policy
// engine, a fence agent and a Fence object per domain served, the webhook
// and the controller, in one controller manager.
func (o *runOptions) run(ctx context.Context, logger logr.Logger) error {
	served, err := o.served()
	if err != nil {
		return flagError("domains", "%v", err)
	}
	cfg, err := o.restConfig()
	if err != nil {
		return err
	}
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	mgr, err := o.newManager(cfg, scheme, served, logger)
	if err != nil {
		return err
	}
	if err := ctrlmetrics.Registry.Register(o.logMetrics); err != nil {
		return fmt.Errorf("register the log's metrics: %w", err)
	}
	holdKinds, _ := hold.ParseKinds(o.holdKinds) // validate checked them
	eng, err := engine.New(engine.Options{
		PolicyDir:  o.policyDir,
		ConfigFile: o.configFile,
		Domains:    served,
		Namespaces: domain.NewNamespaceLabels(mgr.GetCache(), mgr.GetCache(), mgr.GetAPIReader()),
		Logger:     logger.WithName("engine"),
		Registerer: ctrlmetrics.Registry,
		// A revision whose hold decision fails is refused, at start and
		// on reload, while kinds are held.
		HoldKinds: holdKinds,
	})
	if err != nil {
		return fmt.Errorf("load policies: %w", err)
	}
	// One connection to the authority, which every domain's agent shares.
	conn, err := o.authority.dial(ctx)
	if err != nil {
		return err
	}
	authority := fencev1.NewFenceServiceClient(conn)
	domains, identity, err := o.newDomains(ctx, cfg, scheme, served, authority, eng, logger)
	if err != nil {
		return err
	}
	certsReady, err := o.addWebhookCerts(mgr, logger)
	if err != nil {
		return err
	}
	if err := o.addEveryReplica(mgr, eng, domains, certsReady, logger); err != nil {
		return err
	}
	fences := make(map[string]fencestate.Source, len(domains))
	for _, d := range domains {
		fences[d.name] = d.fence
	}
	reconciler, err := controller.SetupWithManager(mgr, controller.Options{
		Policy:     eng,
		Fences:     fences,
		Registerer: ctrlmetrics.Registry,
	})
	if err != nil {
		return err
	}
	var holds fenceobject.Holds
	if len(holdKinds) > 0 {
		if holds, err = hold.SetupWithManager(mgr, hold.Options{
			Kinds: holdKinds, Policy: eng, Fences: fences, QuietFor: o.holdQuietFor, Registerer: ctrlmetrics.Registry,
		}); err != nil {
			return err
		}
	}
	for _, d := range domains {
		if err := o.addFenceObject(mgr, d, identity.Instance, eng, authority, reconciler.Marks(d.name), holds); err != nil {
			return err
		}
	}
	if err := addChecks(mgr, eng, certsReady); err != nil {
		return err
	}
	logger.Info("starting fencegate", "version", version, "cluster", o.clusterName, "uid", identity.ClusterUID, "floorEpoch", o.epoch, "instance", identity.Instance,
		"domains", served, "authority", o.authority.address, "webhook", o.webhookAddress, "policies", eng.PolicyStatus().Source)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("fencegate run: %w", err)
	}
	logger.Info("fencegate stopped")
	return nil
}

// newScheme holds the core types and fencegate's.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register core types: %w", err)
	}
	if err := fencegatev1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register fencegate types: %w", err)
	}
	return scheme, nil
}

// servedDomain is one fence domain this process serves: its agent, and
// the fence state its policies see with the agent's news of its changes.
type servedDomain struct {
	name  string
	agent *fenceagent.ClusterFence
	fence fencestate.Source
	// registerer labels the domain's metrics with its name.
	registerer prometheus.Registerer
	logger     logr.Logger
	// keeper is the domain's Fence keeper once it is made (after the
	// agent, which it takes): the agent withdraws the keeper's published
	// hold before it releases its lease.
	keeper *atomic.Pointer[fenceobject.Keeper]
}

// withdrawHold is the agent's BeforeRelease: it withdraws the hold that
// this instance's membership Lease publishes. Before the keeper is made,
// nothing was published.
func (d servedDomain) withdrawHold(ctx context.Context) error {
	if k := d.keeper.Load(); k != nil {
		return k.WithdrawHold(ctx)
	}
	return nil
}

// awaitHandover is the agent's AwaitHandover: the keeper's, which reads
// the Fence. Before the keeper is made nothing tells that the actuators
// are held, so the release waits (and the lease ends by itself if ctx
// ends first).
func (d servedDomain) awaitHandover(ctx context.Context, fenced fencestate.State) error {
	for {
		if k := d.keeper.Load(); k != nil {
			return k.AwaitHandover(ctx, fenced)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Fence object's keeper is not started yet: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// newDomains makes the fence agent of every served domain, and returns
// them with the identity they share (cluster UID and instance). It reads
// the API server before the manager starts: the cluster UID (without
// --cluster-uid) and each domain's Fence, which it makes when missing.
func (o *runOptions) newDomains(ctx context.Context, cfg *rest.Config, scheme *runtime.Scheme, served []string, authority fencev1.FenceServiceClient, eng *engine.Engine, logger logr.Logger) ([]servedDomain, fenceagent.Options, error) {
	// validate checked these settings, all but a cluster UID read from
	// kube-system, which New checks.
	identity := o.agentOptions()
	if identity.Instance == "" {
		identity.Instance = fenceagent.DefaultInstance()
	}
	// Reads before the manager starts go straight to the API server.
	api, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, identity, fmt.Errorf("client of the API server: %w", err)
	}
	// Without --cluster-uid this reads kube-system.
	if identity.ClusterUID, err = fenceagent.ResolveClusterUID(ctx, api, identity.ClusterUID); err != nil {
		return nil, identity, err
	}
	domains := make([]servedDomain, 0, len(served))
	for _, name := range served {
		d := servedDomain{
			name:       name,
			registerer: prometheus.WrapRegistererWith(prometheus.Labels{"domain": name}, ctrlmetrics.Registry),
			logger:     logger.WithValues("domain", name),
			keeper:     &atomic.Pointer[fenceobject.Keeper]{},
		}
		if d.agent, err = o.newAgent(ctx, api, identity, d, authority, eng, logger.WithName("fence")); err != nil {
			return nil, identity, err
		}
		d.fence = fencestate.Follow(func() (fencestate.State, bool) { return eng.Fence(name) }, d.agent.Subscribe)
		domains = append(domains, d)
	}
	return domains, identity, nil
}

// newAgent makes the fence agent of domain d, which declares the shared
// identity. Its logger has no domain: the agent adds its own.
func (o *runOptions) newAgent(ctx context.Context, api client.Client, identity fenceagent.Options, d servedDomain, authority fencev1.FenceServiceClient, eng *engine.Engine, logger logr.Logger) (*fenceagent.ClusterFence, error) {
	opts := identity
	opts.Domain = d.name
	opts.Client = authority
	opts.Writer = eng
	opts.Logger = logger
	opts.Registerer = d.registerer
	opts.BeforeRelease = d.withdrawHold
	opts.AwaitHandover = d.awaitHandover
	fence, err := fenceobject.Ensure(ctx, api, api, d.name)
	if err != nil {
		return nil, err
	}
	// The agent starts at the Fence's spec.epoch when that is above
	// --epoch, so that its first declaration is not refused as a restored
	// cluster's.
	opts.Epoch = fenceobject.TargetEpoch(o.epoch, fence)
	// A new process presents the cluster generation its peers last wrote:
	// the authority refuses one that presents none or an older one as a
	// copy of the cluster restored from a backup.
	opts.ClusterGeneration = uint64(max(fence.Status.ClusterGeneration, 0))
	agent, err := fenceagent.New(opts)
	if err != nil {
		return nil, fmt.Errorf("fence agent of domain %s: %w", d.name, err)
	}
	return agent, nil
}

// newManager makes the controller manager, its cache narrowed to what
// fencegate reads.
func (o *runOptions) newManager(cfg *rest.Config, scheme *runtime.Scheme, served []string, logger logr.Logger) (manager.Manager, error) {
	leaderElectionNamespace := o.leaderElectionNamespace
	if leaderElectionNamespace == "" {
		leaderElectionNamespace = o.namespace
	}
	byObject, err := fenceobject.CacheOptions(served, o.namespace)
	if err != nil {
		return nil, err
	}
	// The Components and Namespaces are cached without what no reader
	// uses (managedFields, the last-applied annotation): the cache holds
	// every Component of the cluster.
	maps.Copy(byObject, controller.CacheByObject())
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cache.Options{ByObject: byObject},
		Logger:                        logger,
		Metrics:                       metricsserver.Options{BindAddress: o.metricsAddress},
		HealthProbeBindAddress:        o.healthAddress,
		PprofBindAddress:              o.pprofAddress,
		LeaderElection:                o.leaderElect,
		LeaderElectionID:              o.leaderElectionID,
		LeaderElectionNamespace:       leaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		GracefulShutdownTimeout:       &o.shutdownTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("set up the controller manager: %w", err)
	}
	return mgr, nil
}

// addEveryReplica adds what runs on every replica: the engine, the agents
// and the webhook (once its certificate is in place), each answering
// admission requests from its own view of the fence. Only the controller
// needs the leader.
func (o *runOptions) addEveryReplica(mgr manager.Manager, eng *engine.Engine, domains []servedDomain, certsReady <-chan struct{}, logger logr.Logger) error {
	server, err := webhook.New(webhook.Options{
		Addr:       o.webhookAddress,
		CertDir:    o.webhookCertDir,
		Engine:     eng,
		Registerer: ctrlmetrics.Registry,
		Logger:     logger.WithName("webhook"),
	})
	if err != nil {
		return err
	}
	runnables := []runnable.EveryReplica{
		eng.Start,
		func(ctx context.Context) error {
			select {
			case <-certsReady:
			case <-ctx.Done():
				return nil
			}
			return server.Start(ctx)
		},
	}
	for _, d := range domains {
		runnables = append(runnables, d.agent.Start)
	}
	for _, r := range runnables {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("add to the manager: %w", err)
		}
	}
	return nil
}

// addFenceObject adds domain d's Fence object: every replica reports what
// it applies, the leader writes the rest.
func (o *runOptions) addFenceObject(mgr manager.Manager, d servedDomain, instance string, eng *engine.Engine, authority fencev1.FenceServiceClient, marks *controller.Marks, holds fenceobject.Holds) error {
	keeper, err := fenceobject.New(fenceobject.Options{
		Client:            mgr.GetClient(),
		Cache:             mgr.GetCache(),
		Domain:            d.name,
		Namespace:         o.namespace,
		Instance:          instance,
		FloorEpoch:        o.epoch,
		Fence:             d.fence,
		Agent:             d.agent,
		Authority:         authority,
		Policy:            eng,
		Marks:             marks,
		Holds:             holds,
		LeaseDuration:     o.instanceLease,
		HandoverQuietWait: o.handoverQuiet,
		Logger:            d.logger.WithName("fence-object"),
		Registerer:        d.registerer,
	})
	if err != nil {
		return err
	}
	d.keeper.Store(keeper)
	for _, r := range keeper.Runnables() {
		if err := mgr.Add(r); err != nil {
			return fmt.Errorf("add to the manager: %w", err)
		}
	}
	return nil
}

// addChecks adds the health and readiness checks: ready once the policies
// and the fence are loaded and the webhook's certificate is in place.
func addChecks(mgr manager.Manager, eng *engine.Engine, certsReady <-chan struct{}) error {
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return fmt.Errorf("add health check: %w", err)
	}
	if err := mgr.AddReadyzCheck("policies-and-fence", func(*http.Request) error { return eng.Ready() }); err != nil {
		return fmt.Errorf("add readiness check: %w", err)
	}
	if err := mgr.AddReadyzCheck("webhook-certificates", webhookcerts.ReadyCheck(certsReady)); err != nil {
		return fmt.Errorf("add readiness check: %w", err)
	}
	return nil
}

// addWebhookCerts sets up the self-signed certificate manager when asked to,
// and returns a channel that is closed once the serving certificate is in
// place.
func (o *runOptions) addWebhookCerts(mgr manager.Manager, logger logr.Logger) (<-chan struct{}, error) {
	if o.webhookCerts == webhookCertsExternal {
		ready := make(chan struct{})
		close(ready)
		return ready, nil
	}
	if err := os.MkdirAll(o.webhookCertDir, 0o700); err != nil {
		return nil, flagError("webhook-cert-dir", "%v", err)
	}
	ready, err := webhookcerts.Add(mgr, webhookcerts.Options{
		Namespace:         o.namespace,
		SecretName:        o.webhookSecretName,
		ServiceName:       o.webhookServiceName,
		Hosts:             o.webhookHosts,
		CertDir:           o.webhookCertDir,
		ValidatingWebhook: o.validatingWebhook,
		MutatingWebhook:   o.mutatingWebhook,
		Log:               logger.WithName("webhook-certs"),
		Registerer:        ctrlmetrics.Registry,
	})
	if err != nil {
		return nil, fmt.Errorf("webhook certificates: %w", err)
	}
	return ready, nil
}
