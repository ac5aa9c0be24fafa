package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
	"github.com/fencegate/fencegate/authority/statemachine"
	"github.com/fencegate/fencegate/failover"
	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/internal/cli"
)

// Exit codes of `fencegate failover`, beside 0 (done) and 1 (an error
// before or while raising the epoch: bad input, an API server that
// refuses).
const (
	exitFailoverTimeout = 2
	// exitFailoverRefused: the fence authority refuses or would refuse
	// the failover (the epoch's step, checked before patching, or the
	// target's answer while waiting).
	exitFailoverRefused = 3
	// exitFailoverNotQuiesced: the failover is done, but the old holder's
	// held actuators did not all go quiet within --quiesce-timeout.
	exitFailoverNotQuiesced = 4
)

type failoverOptions struct {
	to, from       string
	kubeconfig     string
	domain         string
	epoch          uint64
	maxEpochStep   uint64
	wait           bool
	timeout        time.Duration
	quiesceTimeout time.Duration
}

func newFailoverCommand() *cobra.Command {
	o := &failoverOptions{}
	cmd := &cobra.Command{
		Use:   "failover --to CONTEXT [--from CONTEXT] [--epoch N] [--wait] [--timeout 2m]",
		Short: "Fail the fence over to a cluster by raising its Fence's spec.epoch, and wait until it holds and enforces it",
		Long: `Failover moves the fence of a domain to the cluster of kubeconfig context --to.
It reads the Fence objects of --to and of --from (the old holder), and raises
--to's spec.epoch to one above the holder's epoch (or to --epoch). fencegate on
--to declares it at once, without a restart.

With --wait it follows both Fences until --to is Holding and Enforced (every
fencegate replica applies the new state and every Component is re-marked) and
--from says ClusterFenced and Enforced, printing a timeline. Then it waits up
to --quiesce-timeout for --from's held actuators (the kinds its fencegate holds)
to go quiet: its Fence's Quiesced condition, at once when it holds none. When
--from is not given or its API server does not answer, it waits for --to only,
and says so.

Before patching anything it checks the epoch's step: the fence authority
refuses an epoch more than its --max-epoch-step above the highest epoch of the
domain (EPOCH_STEP_TOO_LARGE). Pass --max-epoch-step when the authority runs
with another step than the default.

Exit codes: 0 done (or, without --wait, the epoch raised); 1 an error before or
while raising the epoch; 2 not done within --timeout; 3 refused: the epoch is
too large a step (checked before patching, or the authority's answer while
waiting), --to is regressed, its authority is unreachable, permission is
denied, or another cluster holds the fence at a higher epoch; 4 done, but
--from's held actuators did not all go quiet within --quiesce-timeout (the
message says what still runs). Each non-zero
exit says why; a timeout or a refusal while waiting also says where the
clusters stand.

Whoever may patch fences may fail over: bind operators to the chart's
<release>-failover ClusterRole on each cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.to, "to", "", "kubeconfig context of the cluster to fail over to (required)")
	fs.StringVar(&o.from, "from", "", "kubeconfig context of the cluster that holds the fence now, to wait until it is fenced too")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file with both contexts (default: $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.domain, "domain", fenceagent.DefaultDomain, "the fence's domain: the name of the Fence objects")
	fs.Uint64Var(&o.epoch, "epoch", 0, "the epoch to raise --to's spec.epoch to (default: one above the holder's)")
	fs.Uint64Var(&o.maxEpochStep, "max-epoch-step", statemachine.DefaultMaxEpochStep, "the fence authority's --max-epoch-step: refuse, before patching, an epoch more than this above the highest epoch the Fences show")
	fs.BoolVar(&o.wait, "wait", false, "wait until --to holds the fence and enforces it, and --from is fenced and enforces it")
	fs.DurationVar(&o.timeout, "timeout", 2*time.Minute, "how long --wait waits for the failover")
	fs.DurationVar(&o.quiesceTimeout, "quiesce-timeout", 2*time.Minute, "how long --wait then waits for --from's held actuators to go quiet (0: not at all)")
	return cmd
}

func (o *failoverOptions) run(cmd *cobra.Command) error {
	var errs []error
	if o.to == "" {
		errs = append(errs, errors.New("--to: required: the kubeconfig context of the cluster to fail over to"))
	}
	if o.from != "" && o.from == o.to {
		errs = append(errs, fmt.Errorf("--from %q is --to: name the context of the cluster that holds the fence now", o.from))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %s: must be positive", o.timeout))
	}
	if o.quiesceTimeout < 0 {
		errs = append(errs, fmt.Errorf("--quiesce-timeout %s: must not be negative", o.quiesceTimeout))
	}
	if o.maxEpochStep == 0 {
		errs = append(errs, errors.New("--max-epoch-step 0: want at least 1, the fence authority's --max-epoch-step"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("failover cannot start:\n  %w", joinLines(errs))
	}
	to, err := o.cluster(o.to)
	if err != nil {
		return err
	}
	opts := failover.Options{Domain: o.domain, To: to, Epoch: o.epoch, MaxEpochStep: o.maxEpochStep, Wait: o.wait, Timeout: o.timeout, QuiesceTimeout: o.quiesceTimeout, Out: cmd.OutOrStdout()}
	if o.from != "" {
		from, err := o.cluster(o.from)
		if err != nil {
			return err
		}
		opts.From = &from
	}
	err = failover.Run(cmd.Context(), opts)
	if errors.Is(err, failover.ErrAlreadyHolding) {
		_, werr := fmt.Fprintln(cmd.OutOrStdout(), "nothing to do:", err)
		return werr
	}
	return withFailoverExitCode(err)
}

// withFailoverExitCode gives an error of failover.Run its exit code: 2 for
// the timeout, 3 for a refusal (the epoch's step, checked before patching,
// or the target's answer while waiting), 4 for an old holder that did not
// quiesce, 1 for any other.
func withFailoverExitCode(err error) error {
	var timeout *failover.TimeoutError
	var loud *failover.QuiesceTimeoutError
	var refused *failover.RefusedError
	var step *failover.StepError
	switch {
	case errors.As(err, &timeout):
		return &cli.ExitCodeError{Code: exitFailoverTimeout, Err: err}
	case errors.As(err, &refused), errors.As(err, &step):
		return &cli.ExitCodeError{Code: exitFailoverRefused, Err: err}
	case errors.As(err, &loud):
		return &cli.ExitCodeError{Code: exitFailoverNotQuiesced, Err: err}
	}
	return err
}

// cluster is a client of the API server of one kubeconfig context.
func (o *failoverOptions) cluster(context string) (failover.Cluster, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = o.kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: context})
	raw, err := loader.RawConfig()
	if err != nil {
		return failover.Cluster{}, fmt.Errorf("read the kubeconfig: %w", err)
	}
	if _, ok := raw.Contexts[context]; !ok {
		names := slices.Sorted(func(yield func(string) bool) {
			for name := range raw.Contexts {
				if !yield(name) {
					return
				}
			}
		})
		return failover.Cluster{}, fmt.Errorf("the kubeconfig has no context %q; it has: %s", context, strings.Join(names, ", "))
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		return failover.Cluster{}, fmt.Errorf("context %s: %w", context, err)
	}
	cfg.UserAgent = "fencegate-failover/" + version
	scheme := runtime.NewScheme()
	if err := fencegatev1alpha1.AddToScheme(scheme); err != nil {
		return failover.Cluster{}, fmt.Errorf("register fencegate types: %w", err)
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return failover.Cluster{}, fmt.Errorf("client of context %s: %w", context, err)
	}
	return failover.Cluster{Context: context, Client: c}, nil
}
