package fenceagent

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fencestate"
)

// Defaults of the agent's timing options; DESIGN.md's agent rules name them.
const (
	// DefaultDomain is the fence domain used when none is given.
	DefaultDomain = "default"
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

// ValidateClusterName checks that name can identify a cluster: a DNS label
// (RFC 1123), as the authority requires.
func ValidateClusterName(name string) error {
	if name == "" {
		return errors.New("cluster name is empty: set --cluster-name (FENCEGATE_CLUSTER_NAME) to this cluster's name, e.g. east")
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("cluster name %q is not a DNS label (%s): use at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit", name, strings.Join(errs, "; "))
	}
	return nil
}

// ValidateEpoch checks that epoch can be declared: epochs start at 1 so that
// an unset value is never mistaken for a real one.
func ValidateEpoch(epoch uint64) error {
	if epoch < 1 {
		return errors.New("epoch is 0: set --epoch (FENCEGATE_EPOCH) to 1 or more; raise it above the active cluster's epoch to take over")
	}
	return nil
}

// ValidateDomain checks a fence domain name: a DNS label, like cluster names,
// so that it reads the same in logs, metrics and the authority's keys.
func ValidateDomain(domain string) error {
	if errs := validation.IsDNS1123Label(domain); len(errs) > 0 {
		return fmt.Errorf("fence domain %q is not a DNS label (%s): use lower-case letters, digits and '-', or leave it empty for %q", domain, strings.Join(errs, "; "), DefaultDomain)
	}
	return nil
}

// maxUIDLength is the longest cluster UID the authority accepts (a
// Kubernetes UID has 36 characters).
const maxUIDLength = 128

// maxInstanceLength is the longest instance name the authority accepts (a
// pod name has at most 253 characters).
const maxInstanceLength = 253

// instanceSuffixLength is the length of the random suffix of default
// instance names, as long as the one Kubernetes gives pod names.
const instanceSuffixLength = 5

// DefaultInstance returns a name for this process as an instance of its
// cluster: the host name (a pod's name, unless its spec sets another) with
// a random suffix, so that a restarted process is a new instance and never
// renews a lease its previous run may still be believed to hold.
func DefaultInstance() string {
	host, err := os.Hostname()
	if err != nil || host == "" || len(host) > maxInstanceLength-instanceSuffixLength-1 || ValidateInstance(host) != nil {
		host = "fencegate"
	}
	return host + "-" + utilrand.String(instanceSuffixLength)
}

// ValidateInstance checks an instance name as the authority does: at most
// 253 characters of UTF-8, without spaces or control characters.
func ValidateInstance(instance string) error {
	const how = "set --instance (FENCEGATE_INSTANCE) to this process's pod name, or leave it empty for the host name with a random suffix"
	switch {
	case len(instance) > maxInstanceLength:
		return fmt.Errorf("instance name is %d characters long, more than the %d the authority accepts: %s", len(instance), maxInstanceLength, how)
	case !utf8.ValidString(instance):
		return fmt.Errorf("instance name %q is not valid UTF-8: %s", instance, how)
	case hasSpaceOrControl(instance):
		return fmt.Errorf("instance name %q contains spaces or control characters: %s", instance, how)
	}
	return nil
}

// hasSpaceOrControl reports whether s holds a space or an ASCII control
// character, which the authority refuses in UIDs and instance names.
func hasSpaceOrControl(s string) bool {
	return strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f })
}

// validateClusterUID applies the authority's rules for cluster UIDs, so that
// a bad override fails at start instead of on every declaration.
func validateClusterUID(uid string) error {
	const how = "resolve it with ResolveClusterUID (the kube-system Namespace UID) or set --cluster-uid (FENCEGATE_CLUSTER_UID)"
	switch {
	case uid == "":
		return errors.New("cluster UID is empty: " + how)
	case len(uid) > maxUIDLength:
		return fmt.Errorf("cluster UID is %d characters long, more than the %d the authority accepts: %s", len(uid), maxUIDLength, how)
	case hasSpaceOrControl(uid):
		return fmt.Errorf("cluster UID %q contains spaces or control characters: %s", uid, how)
	}
	return nil
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
	if err := ValidateDomain(o.Domain); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateClusterName(o.ClusterName); err != nil {
		errs = append(errs, err)
	}
	if err := validateClusterUID(o.ClusterUID); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateEpoch(o.Epoch); err != nil {
		errs = append(errs, err)
	}
	if err := ValidateInstance(o.Instance); err != nil {
		errs = append(errs, err)
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
