package fenceagent

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/clock"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

// Defaults of the agent's options; docs/design.md's agent rules name the
// timing ones.
const (
	// DefaultDomain is the fence domain used when none is given.
	DefaultDomain = rpctypes.DefaultDomain
	// DefaultDeclareInterval is how often the agent declares its epoch.
	DefaultDeclareInterval = 5 * time.Second
	// DefaultDeclareTimeout bounds each declaration.
	DefaultDeclareTimeout = 3 * time.Second
	// DefaultLeaseMargin is taken off the lease so that this cluster stops
	// acting as holder before the authority may hand the fence to another
	// cluster: it covers clock rate differences and the time to write the
	// new status into the policy store.
	DefaultLeaseMargin = 2 * time.Second
)

// Options configure a ClusterFence. Zero durations take the defaults above.
type Options struct {
	// Client talks to the fence authority (see Dial).
	Client fencev1.FenceServiceClient
	// Writer receives data.fence on every change; the policy engine
	// implements it.
	Writer fencestate.Writer

	// Domain names the fence; empty means DefaultDomain.
	Domain string
	// ClusterName is this cluster's name, a DNS label.
	ClusterName string
	// ClusterUID is the UID of this cluster's kube-system Namespace (see
	// ResolveClusterUID).
	ClusterUID string
	// Epoch is the epoch this cluster declares, at least 1.
	Epoch uint64
	// ClusterGeneration is the generation of this cluster the process
	// presents in its first declaration: the one the cluster's Fence status
	// keeps (clusterGeneration); 0 when it has none. Then the agent presents
	// the newest one the authority or AdoptClusterGeneration gives it, and
	// State.ClusterGeneration names it. The authority refuses a process of a
	// copy of the cluster restored from a backup, which presents an old one,
	// with CLUSTER_RESTORED.
	ClusterGeneration uint64
	// Instance names this process within its cluster, e.g. the pod name:
	// every process of a cluster (the replicas, the old and new pods of a
	// rollout) holds a lease of its own, so the fence moves to another
	// cluster only once none of them may still act as holder. Empty means
	// DefaultInstance(): the host name with a random suffix, so that every
	// start of the process is a new instance.
	Instance string

	// DeclareInterval is the time between two heartbeats; each wait is
	// jittered below it so that many clusters do not declare in step.
	DeclareInterval time.Duration
	// DeclareTimeout bounds each declaration; it must be shorter than
	// DeclareInterval.
	DeclareTimeout time.Duration
	// LeaseMargin is taken off every granted lease: being active is valid
	// until send time + lease TTL − margin.
	LeaseMargin time.Duration

	// Clock is the source of time; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives one line per fence transition; the zero Logger
	// discards.
	Logger logr.Logger
	// Registerer receives the agent's metrics; nil means they are not
	// registered anywhere.
	Registerer prometheus.Registerer
}

// The advice each setting's error gives, naming the flag and variable of
// `fencegate run` that sets it.
const (
	fixDomain      = `set --domain (FENCEGATE_DOMAIN) to lower-case letters, digits and '-', or leave it empty for "default"`
	fixClusterName = "set --cluster-name (FENCEGATE_CLUSTER_NAME) to this cluster's name, e.g. east: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"
	fixClusterUID  = "resolve it with ResolveClusterUID (the kube-system Namespace UID) or set --cluster-uid (FENCEGATE_CLUSTER_UID)"
	fixEpoch       = "set --epoch (FENCEGATE_EPOCH) to 1 or more; raise it above the active cluster's epoch to take over"
	fixInstance    = "set --instance (FENCEGATE_INSTANCE) to this process's pod name, or leave it empty for the host name with a random suffix"
)

// settingError turns a field error of a setting into an error that says
// what to do, or returns nil.
func settingError(err error, fix string) error {
	var fe *rpctypes.FieldError
	if !errors.As(err, &fe) {
		return err
	}
	return fmt.Errorf("%s: %s", fe.Describe(), fix)
}

// instanceSuffixLength is the length of the random suffix of default
// instance names, as long as the one Kubernetes gives pod names.
const instanceSuffixLength = 5

// DefaultInstance returns a name for this process as an instance of its
// cluster: the host name (a pod's name, unless its spec sets another) with
// a random suffix, so that a restarted process is a new instance and never
// renews a lease its previous run may still be believed to hold.
func DefaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" || len(host) > rpctypes.MaxInstanceLength-instanceSuffixLength-1 || rpctypes.ValidateInstance(host) != nil {
		host = "fencegate"
	}
	return host + "-" + utilrand.String(instanceSuffixLength)
}

// withDefaults fills the zero values and checks everything, so that New
// reports every mistake at once.
func (o Options) withDefaults() (Options, error) {
	if o.Domain == "" {
		o.Domain = DefaultDomain
	}
	if o.DeclareInterval == 0 {
		o.DeclareInterval = DefaultDeclareInterval
	}
	if o.DeclareTimeout == 0 {
		o.DeclareTimeout = DefaultDeclareTimeout
	}
	if o.LeaseMargin == 0 {
		o.LeaseMargin = DefaultLeaseMargin
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Instance == "" {
		o.Instance = DefaultInstance()
	}

	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("no fence authority client: dial the authority (fenceagent.Dial) and pass the client"))
	}
	if o.Writer == nil {
		errs = append(errs, errors.New("no data.fence writer: pass the policy engine's store"))
	}
	for _, err := range []error{
		settingError(rpctypes.ValidateDomain(o.Domain), fixDomain),
		settingError(rpctypes.ValidateClusterName(o.ClusterName), fixClusterName),
		settingError(rpctypes.ValidateClusterUID(o.ClusterUID), fixClusterUID),
		settingError(rpctypes.ValidateEpoch(o.Epoch), fixEpoch),
		settingError(rpctypes.ValidateInstance(o.Instance), fixInstance),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if o.DeclareInterval < 0 {
		errs = append(errs, fmt.Errorf("declare interval %s is negative: use a positive duration such as %s", o.DeclareInterval, DefaultDeclareInterval))
	}
	if o.DeclareTimeout < 0 {
		errs = append(errs, fmt.Errorf("declare timeout %s is negative: use a positive duration such as %s", o.DeclareTimeout, DefaultDeclareTimeout))
	}
	if o.DeclareTimeout >= o.DeclareInterval && o.DeclareInterval > 0 {
		errs = append(errs, fmt.Errorf("declare timeout %s is not shorter than the declare interval %s: lower the timeout or raise the interval", o.DeclareTimeout, o.DeclareInterval))
	}
	if o.LeaseMargin < 0 {
		errs = append(errs, fmt.Errorf("lease margin %s is negative: use a positive duration such as %s", o.LeaseMargin, DefaultLeaseMargin))
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("fence agent options: %w", errors.Join(errs...))
	}
	return o, nil
}
