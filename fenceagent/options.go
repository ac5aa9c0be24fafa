package fenceagent

import (
	"context"
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
	// DefaultTakeoverGrace is what fencegate run gives TakeoverGrace: with
	// the lease margin before the grant, a holder cut off from the
	// authority has margin + grace to suspend its actuators, 12 s with the
	// default 2 s margin and 16 s with the chart's 6 s, more than holding
	// 1,000 objects took on a busy two-core machine (docs/design.md,
	// "Handover order").
	DefaultTakeoverGrace = 10 * time.Second
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

	// BeforeRelease, if set, runs before this instance gives its lease up,
	// after the store took the state that stops it acting as holder: in
	// fencegate run it withdraws the hold this instance's membership Lease
	// publishes (package gate). When it fails, the lease is not released
	// (a release is never needed for safety: the lease ends by itself),
	// and the release is retried on the next CLUSTER_FENCED answer.
	BeforeRelease func(ctx context.Context) error
	// AwaitHandover, if set, runs before an instance told CLUSTER_FENCED
	// as holder releases its lease (a takeover, or a revocation), after the
	// store took the fenced state, and before BeforeRelease: the cluster
	// taking over is granted once the release is in, so its actuators may
	// resume only after this cluster's are suspended. It returns nil once
	// this cluster's actuators are held (fencegate run: the Fence's
	// Quiesced says every held object is held, and quiet up to a bound). Its
	// context ends with the validity of the lease being released: past
	// that the instance no longer acts as holder anyway, and the authority
	// grants the takeover when the lease ends, so the lease is left to end
	// by itself, never released early.
	AwaitHandover func(ctx context.Context, fenced fencestate.State) error
	// TakeoverGrace is how long a holder granted after the previous
	// holder's lease expired (a holder cut off from the authority) keeps
	// its actuators suspended, from the grant's time: that holder began
	// suspending its own only when its lease's validity ended, a lease
	// margin before the grant. State.ResumeAtNS says when it ends. Zero
	// means no grace; docs/design.md ("Handover order") says how to size it.
	TakeoverGrace time.Duration

	// Clock is the source of time; nil means the real clock.
	Clock clock.WithTicker
	// Logger receives one line per fence transition; the zero Logger
	// discards.
	Logger logr.Logger
	// Registerer receives the agent's metrics; nil means they are not
	// registered anywhere.
	Registerer prometheus.Registerer
}

// Setting names one of the agent's settings, by its field in Options, so
// that a program can tell its users where they set it: `fencegate run`
// names its flags and variables.
type Setting string

// The agent's settings that have rules.
const (
	SettingDomain          Setting = "Domain"
	SettingClusterName     Setting = "ClusterName"
	SettingClusterUID      Setting = "ClusterUID"
	SettingEpoch           Setting = "Epoch"
	SettingInstance        Setting = "Instance"
	SettingDeclareInterval Setting = "DeclareInterval"
	SettingDeclareTimeout  Setting = "DeclareTimeout"
	SettingLeaseMargin     Setting = "LeaseMargin"
	SettingTakeoverGrace   Setting = "TakeoverGrace"
)

// SettingError is one problem with the agent's settings. It keeps which
// settings are at fault apart from how they are named, so that a program
// whose users set them some other way (flags, variables, a file) can say
// what to change in their terms (Describe); Error names the Options fields.
type SettingError struct {
	// Settings are the settings at fault: the one the problem is about,
	// then the others its rule involves.
	Settings []Setting
	// Problem says what is wrong, e.g. "epoch is 0: epochs start at 1".
	Problem string
	// fix says what to do, naming each setting as name does.
	fix func(name func(Setting) string) string
	// err is the rule's own error, if it has one (an
	// *rpctypes.FieldError, whose Field is the gRPC API's name).
	err error
}

// Error says what is wrong and which Options field to change.
func (e *SettingError) Error() string {
	return e.Describe(func(s Setting) string { return "Options." + string(s) })
}

// Describe says what is wrong and what to change, naming each setting as
// name does, e.g. as the flag that sets it.
func (e *SettingError) Describe(name func(Setting) string) string {
	return e.Problem + ": " + e.fix(name)
}

// Unwrap returns the rule's own error, so that errors.As finds the
// *rpctypes.FieldError of a setting the authority checks too.
func (e *SettingError) Unwrap() error { return e.err }

// SettingErrors are every problem Validate found, in the order of the
// Options fields.
type SettingErrors []*SettingError

// Error says every problem, one per line.
func (es SettingErrors) Error() string { return errors.Join(es.Unwrap()...).Error() }

// Unwrap returns each problem, for errors.Is and errors.As.
func (es SettingErrors) Unwrap() []error {
	errs := make([]error, len(es))
	for i, e := range es {
		errs[i] = e
	}
	return errs
}

// setTo is the fix of most problems: set the one setting at fault as
// advice says.
func setTo(s Setting, advice string) func(name func(Setting) string) string {
	return func(name func(Setting) string) string { return "set " + name(s) + " " + advice }
}

// fieldProblem turns the error of one of the rules the agent shares with
// the authority (rpctypes) into a SettingError that says what to do, or
// returns nil.
func fieldProblem(s Setting, err error, advice string) *SettingError {
	if err == nil {
		return nil
	}
	problem := err.Error()
	var fe *rpctypes.FieldError
	if errors.As(err, &fe) {
		problem = fe.Describe()
	}
	return &SettingError{Settings: []Setting{s}, Problem: problem, fix: setTo(s, advice), err: err}
}

// negative is the problem of a duration setting below zero; zero takes def.
func negative(s Setting, what string, d, def time.Duration) *SettingError {
	if d >= 0 {
		return nil
	}
	return &SettingError{
		Settings: []Setting{s},
		Problem:  fmt.Sprintf("%s %s is negative", what, d),
		fix:      setTo(s, fmt.Sprintf("to a positive duration such as %s", def)),
	}
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
	o = o.defaulted()
	var errs []error
	if o.Client == nil {
		errs = append(errs, errors.New("no fence authority client: dial the authority (fenceagent.Dial) and pass the client"))
	}
	if o.Writer == nil {
		errs = append(errs, errors.New("no data.fence writer: pass the policy engine's store"))
	}
	if err := o.Validate(); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return o, fmt.Errorf("fence agent options: %w", errors.Join(errs...))
	}
	return o, nil
}

// defaulted returns o with its zero values filled.
func (o Options) defaulted() Options {
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
	return o
}

// Validate checks every setting as New takes it (zero values stand for the
// defaults) and returns every problem at once as SettingErrors, or nil.
// New checks the same rules; Validate needs no Client or Writer, so that a
// program can check what its users gave it before it dials the authority
// or reads the cluster UID.
func (o Options) Validate() error {
	o = o.defaulted()
	var errs SettingErrors
	for _, err := range []*SettingError{
		fieldProblem(SettingDomain, rpctypes.ValidateDomain(o.Domain),
			`to lower-case letters, digits and '-', or leave it empty for "default"`),
		fieldProblem(SettingClusterName, rpctypes.ValidateClusterName(o.ClusterName),
			"to this cluster's name, e.g. east: at most 63 lower-case letters, digits and '-', starting and ending with a letter or digit"),
		fieldProblem(SettingClusterUID, rpctypes.ValidateClusterUID(o.ClusterUID),
			"to this cluster's identity, e.g. its kube-system Namespace's UID (kubectl get namespace kube-system -o jsonpath={.metadata.uid})"),
		fieldProblem(SettingEpoch, rpctypes.ValidateEpoch(o.Epoch),
			"to 1 or more; raise it above the active cluster's epoch to take over"),
		fieldProblem(SettingInstance, rpctypes.ValidateInstance(o.Instance),
			"to this process's pod name, or leave it empty for the host name with a random suffix"),
		negative(SettingDeclareInterval, "declare interval", o.DeclareInterval, DefaultDeclareInterval),
		negative(SettingDeclareTimeout, "declare timeout", o.DeclareTimeout, DefaultDeclareTimeout),
		shorterTimeout(o.DeclareTimeout, o.DeclareInterval),
		negative(SettingLeaseMargin, "lease margin", o.LeaseMargin, DefaultLeaseMargin),
		negative(SettingTakeoverGrace, "takeover grace", o.TakeoverGrace, DefaultTakeoverGrace),
	} {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// shorterTimeout is the problem of a declare timeout that is not shorter
// than the interval: a declaration would still run when the next one is
// due. A negative interval is a problem of its own.
func shorterTimeout(timeout, interval time.Duration) *SettingError {
	if timeout < interval || interval < 0 {
		return nil
	}
	return &SettingError{
		Settings: []Setting{SettingDeclareTimeout, SettingDeclareInterval},
		Problem:  fmt.Sprintf("declare timeout %s is not shorter than the declare interval %s", timeout, interval),
		fix: func(name func(Setting) string) string {
			return "lower " + name(SettingDeclareTimeout) + " or raise " + name(SettingDeclareInterval)
		},
	}
}
