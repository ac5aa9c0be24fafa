package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/utils/clock"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/cmd/fencegate/internal/fenceprint"
	"github.com/fencegate/fencegate/fenceagent"
)

// fenceOptions are the flags shared by the fence subcommands.
type fenceOptions struct {
	conn    authorityClientOptions
	domain  string
	output  string
	timeout time.Duration
	// clock tells how long ago things happened and how much lease is
	// left, and times the pause before a watch opens again.
	clock clock.WithTicker
}

func newFenceCommand() *cobra.Command { return newFenceCommandWithClock(clock.RealClock{}) }

// newFenceCommandWithClock lets tests show times against the clock of a
// test authority.
func newFenceCommandWithClock(clk clock.WithTicker) *cobra.Command {
	o := &fenceOptions{clock: clk}
	cmd := &cobra.Command{
		Use:   "fence",
		Short: "Look at, watch, revoke or read the history of the fence of a fence authority",
		Args:  cobra.NoArgs,
	}
	fs := cmd.PersistentFlags()
	o.conn.addFlags(fs)
	fs.StringVar(&o.domain, "domain", fenceagent.DefaultDomain, "domain of the fence")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long a status or release call may take")
	cmd.AddCommand(o.statusCommand(), o.watchCommand(), o.historyCommand(), o.revokeCommand(), o.forgetCommand(), o.releaseCommand())
	return cmd
}

func (o *fenceOptions) statusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the holder with the lease of each of its instances, the pending takeover and every cluster seen",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.call(cmd, func(ctx context.Context, c fencev1.FenceServiceClient, p fenceprint.Printer) error {
				resp, err := c.GetFence(ctx, &fencev1.GetFenceRequest{Domain: o.domain})
				if err != nil {
					return fmt.Errorf("get the fence from %s: %w", o.conn.address, err)
				}
				return p.Fence(resp.GetFence())
			})
		},
	}
}

func (o *fenceOptions) releaseCommand() *cobra.Command {
	var name, uid, instance string
	var epoch uint64
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Release the lease of one instance of the holder, as that instance (operators revoke instead)",
		Long: `Release the lease of one instance of the holder. Every process of the holding
cluster (each fencegate pod) is an instance with a lease of its own, and the
fence moves to another cluster only once each instance released its lease or
the lease ended; "fence status" lists them. The holder's agents release by
themselves when they are told a takeover is pending, or when they stop.

A release says "this instance no longer acts as holder", so only the instance
may say it: with authorization on, only the holding cluster's own identity may
release. An operator who wants a cluster to stop holding the fence revokes its
leases instead ("fence revoke"), which never shortens them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" || uid == "" || epoch == 0 {
				return errors.New("--cluster, --cluster-uid and --epoch name the holder that releases: all are required")
			}
			return o.call(cmd, func(ctx context.Context, c fencev1.FenceServiceClient, p fenceprint.Printer) error {
				resp, err := c.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{Domain: o.domain, ClusterName: name, ClusterUid: uid, Epoch: epoch, Instance: instance})
				if err != nil {
					return fmt.Errorf("release the fence at %s: %w", o.conn.address, err)
				}
				if err := p.Note("%s", releaseSummary(resp.GetFence(), instance)); err != nil {
					return err
				}
				return p.Fence(resp.GetFence())
			})
		},
	}
	cmd.Flags().StringVar(&name, "cluster", "", "name of the holding cluster")
	cmd.Flags().StringVar(&uid, "cluster-uid", "", "UID of the holding cluster (its kube-system Namespace's UID)")
	cmd.Flags().Uint64Var(&epoch, "epoch", 0, "the epoch the instance declared")
	cmd.Flags().StringVar(&instance, "instance", "", `the instance whose lease is released, as "fence status" lists it (a fencegate pod's name); empty is the instance of clients that name none`)
	return cmd
}

func (o *fenceOptions) revokeCommand() *cobra.Command {
	var name, instance string
	cmd := &cobra.Command{
		Use:   "revoke --cluster NAME [--instance POD]",
		Short: "Make the holder's leases non-renewable, so that it stops holding the fence when they end",
		Long: `Revoke the leases of the holding cluster: those of one instance (--instance),
or every lease of the cluster, which also keeps new instances from joining.
Revoked instances are told CLUSTER_FENCED (reason REVOKED) at their next
declaration, or at once through their watch, and stop admitting Component
changes.

A revocation never shortens a lease: an instance cut off from the authority
cannot hear of it and stops acting as holder only when its lease runs out by
its own clock. So the fence moves to another cluster (one that declares a
higher epoch) only once every revoked lease has ended, or its own instance
released it. The cluster gets the fence back by declaring an epoch above the
one it was revoked at. Every revocation is recorded in "fence history".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" {
				return errors.New("--cluster names the holding cluster whose leases are revoked: it is required")
			}
			req := &fencev1.RevokeFenceRequest{Domain: o.domain, ClusterName: name}
			if cmd.Flags().Changed("instance") {
				req.Instance = &instance
			}
			return o.call(cmd, func(ctx context.Context, c fencev1.FenceServiceClient, p fenceprint.Printer) error {
				resp, err := c.RevokeFence(ctx, req)
				if err != nil {
					return fmt.Errorf("revoke at %s: %w", o.conn.address, err)
				}
				what := "every lease of " + name
				if req.Instance != nil {
					what = fmt.Sprintf("the lease of instance %s of %s", fenceprint.InstanceName(instance), name)
				}
				until := resp.GetRevokedUntil().AsTime()
				if err := p.Note("Revoked %s in domain %s: no lease is renewed; the fence can move to another cluster from %s (in %s), sooner only if each revoked instance releases its lease.",
					what, resp.GetFence().GetDomain(), fenceprint.Timestamp(until), max(until.Sub(o.clock.Now()), 0).Round(100*time.Millisecond)); err != nil {
					return err
				}
				return p.Fence(resp.GetFence())
			})
		},
	}
	cmd.Flags().StringVar(&name, "cluster", "", "name of the holding cluster")
	cmd.Flags().StringVar(&instance, "instance", "", `the one instance whose lease is revoked, as "fence status" lists it; without it every lease of the cluster is revoked`)
	return cmd
}

func (o *fenceOptions) forgetCommand() *cobra.Command {
	var name, uid string
	cmd := &cobra.Command{
		Use:   "forget --cluster NAME --cluster-uid UID",
		Short: "Remove what the authority remembers of a decommissioned or mistyped cluster",
		Long: `Remove a cluster's record from the authority: its highest epoch, which a
declaration below it would be refused against, and which bounds the epochs any
cluster may declare (see --max-epoch-step of fencegate-authority). Use it for a
cluster that was decommissioned, or one that declared under a mistyped name or
a wrong epoch. It is refused while that cluster holds the fence or is taking it
over. It is recorded in "fence history".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" || uid == "" {
				return errors.New(`--cluster and --cluster-uid name the cluster to forget, as "fence status" lists it: both are required`)
			}
			return o.call(cmd, func(ctx context.Context, c fencev1.FenceServiceClient, p fenceprint.Printer) error {
				resp, err := c.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{Domain: o.domain, ClusterName: name, ClusterUid: uid})
				if err != nil {
					return fmt.Errorf("forget cluster %s at %s: %w", name, o.conn.address, err)
				}
				if err := p.Note("Forgot cluster %s (uid %s) in domain %s; its highest epoch was %d.",
					name, uid, resp.GetFence().GetDomain(), resp.GetForgotten().GetHighestEpoch()); err != nil {
					return err
				}
				return p.Fence(resp.GetFence())
			})
		},
	}
	cmd.Flags().StringVar(&name, "cluster", "", "name of the cluster, as the authority recorded it")
	cmd.Flags().StringVar(&uid, "cluster-uid", "", "UID of the cluster")
	return cmd
}

// releaseSummary says what a successful release of instance did to the
// fence f it returned.
func releaseSummary(f *fencev1.Fence, instance string) string {
	h := f.GetHolder()
	var lease *fencev1.InstanceLease
	others := 0
	for _, l := range h.GetInstances() {
		switch {
		case l.GetInstance() == instance:
			lease = l
		case !l.GetReleased():
			others++
		}
	}
	switch {
	case lease == nil:
		return fmt.Sprintf("Instance %s of %s holds no lease of the fence of domain %s (it never declared, or its lease ended): nothing to release.",
			fenceprint.InstanceName(instance), h.GetClusterName(), f.GetDomain())
	case h.GetReleased():
		return fmt.Sprintf("Released the fence of domain %s held by %s at epoch %d: no instance of %s holds a lease any more.",
			f.GetDomain(), h.GetClusterName(), h.GetEpoch(), h.GetClusterName())
	default:
		return fmt.Sprintf("Released the lease of instance %s of %s in domain %s; %d other instance(s) of %s still hold a lease, and the fence stays with %s until each one released or its lease ended.",
			fenceprint.InstanceName(instance), h.GetClusterName(), f.GetDomain(), others, h.GetClusterName(), h.GetClusterName())
	}
}

// call dials the authority for one call bounded by --timeout, and hands
// the client and the printer of --output to do.
func (o *fenceOptions) call(cmd *cobra.Command, do func(ctx context.Context, c fencev1.FenceServiceClient, p fenceprint.Printer) error) error {
	p, err := fenceprint.New(o.output, cmd.OutOrStdout(), o.clock)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), o.timeout)
	defer cancel()
	conn, err := o.conn.dial(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return do(ctx, fencev1.NewFenceServiceClient(conn), p)
}
