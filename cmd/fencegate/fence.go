package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/internal/rewatch"
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
			client, ctx, cancel, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.GetFence(ctx, &fencev1.GetFenceRequest{Domain: o.domain})
			if err != nil {
				return fmt.Errorf("get the fence from %s: %w", o.conn.address, err)
			}
			return o.printFence(cmd.OutOrStdout(), resp.GetFence())
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
			client, ctx, cancel, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{Domain: o.domain, ClusterName: name, ClusterUid: uid, Epoch: epoch, Instance: instance})
			if err != nil {
				return fmt.Errorf("release the fence at %s: %w", o.conn.address, err)
			}
			if o.output == "table" {
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "%s\n\n", releaseSummary(resp.GetFence(), instance)); err != nil {
					return err
				}
			}
			return o.printFence(cmd.OutOrStdout(), resp.GetFence())
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
			client, ctx, cancel, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.RevokeFence(ctx, req)
			if err != nil {
				return fmt.Errorf("revoke at %s: %w", o.conn.address, err)
			}
			if o.output == "table" {
				what := "every lease of " + name
				if req.Instance != nil {
					what = fmt.Sprintf("the lease of instance %s of %s", instanceName(instance), name)
				}
				until := resp.GetRevokedUntil().AsTime()
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "Revoked %s in domain %s: no lease is renewed; the fence can move to another cluster from %s (in %s), sooner only if each revoked instance releases its lease.\n\n",
					what, resp.GetFence().GetDomain(), timestamp(until), max(until.Sub(o.clock.Now()), 0).Round(100*time.Millisecond)); err != nil {
					return err
				}
			}
			return o.printFence(cmd.OutOrStdout(), resp.GetFence())
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
cluster may declare (see --max-epoch-step of "fencegate authority"). Use it for a
cluster that was decommissioned, or one that declared under a mistyped name or
a wrong epoch. It is refused while that cluster holds the fence or is taking it
over. It is recorded in "fence history".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if name == "" || uid == "" {
				return errors.New(`--cluster and --cluster-uid name the cluster to forget, as "fence status" lists it: both are required`)
			}
			client, ctx, cancel, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.ForgetCluster(ctx, &fencev1.ForgetClusterRequest{Domain: o.domain, ClusterName: name, ClusterUid: uid})
			if err != nil {
				return fmt.Errorf("forget cluster %s at %s: %w", name, o.conn.address, err)
			}
			if o.output == "table" {
				if _, err := fmt.Fprintf(cmd.OutOrStdout(), "Forgot cluster %s (uid %s) in domain %s; its highest epoch was %d.\n\n",
					name, uid, resp.GetFence().GetDomain(), resp.GetForgotten().GetHighestEpoch()); err != nil {
					return err
				}
			}
			return o.printFence(cmd.OutOrStdout(), resp.GetFence())
		},
	}
	cmd.Flags().StringVar(&name, "cluster", "", "name of the cluster, as the authority recorded it")
	cmd.Flags().StringVar(&uid, "cluster-uid", "", "UID of the cluster")
	return cmd
}

func (o *fenceOptions) historyCommand() *cobra.Command {
	var since string
	var limit uint32
	cmd := &cobra.Command{
		Use:   "history [--since 1h] [--limit N]",
		Short: "Show every recorded change of the fence and every operator action on it, oldest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := &fencev1.GetFenceHistoryRequest{Domain: o.domain, Limit: limit}
			if since != "" {
				from, err := parseSince(since, o.clock.Now())
				if err != nil {
					return err
				}
				req.Since = timestamppb.New(from)
			}
			client, ctx, cancel, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.GetFenceHistory(ctx, req)
			if err != nil {
				return fmt.Errorf("read the fence history at %s: %w", o.conn.address, err)
			}
			return o.printHistory(cmd.OutOrStdout(), resp.GetEvents())
		},
	}
	cmd.Flags().StringVar(&since, "since", "", "only events since this long ago (1h, 30m) or this time (RFC 3339)")
	cmd.Flags().Uint32Var(&limit, "limit", 0, "only the newest N events (0: every one kept)")
	return cmd
}

// parseSince reads --since: a duration back from now, or a time.
func parseSince(since string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(since); err == nil {
		if d < 0 {
			return time.Time{}, fmt.Errorf("--since %s: want a positive duration", since)
		}
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, since)
	if err != nil {
		return time.Time{}, fmt.Errorf("--since %q: want a duration such as 1h or a time such as 2026-12-01T09:00:00Z", since)
	}
	return t, nil
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
			instanceName(instance), h.GetClusterName(), f.GetDomain())
	case h.GetReleased():
		return fmt.Sprintf("Released the fence of domain %s held by %s at epoch %d: no instance of %s holds a lease any more.",
			f.GetDomain(), h.GetClusterName(), h.GetEpoch(), h.GetClusterName())
	default:
		return fmt.Sprintf("Released the lease of instance %s of %s in domain %s; %d other instance(s) of %s still hold a lease, and the fence stays with %s until each one released or its lease ended.",
			instanceName(instance), h.GetClusterName(), f.GetDomain(), others, h.GetClusterName(), h.GetClusterName())
	}
}

// instanceName shows an instance name; the empty one is that of clients
// that name none.
func instanceName(instance string) string {
	if instance == "" {
		return `""`
	}
	return instance
}

func (o *fenceOptions) watchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch",
		Short: "Print the fence, then each change of holder, pending takeover or release, until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.checkOutput(); err != nil {
				return err
			}
			conn, err := o.conn.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			return o.watch(cmd.Context(), fencev1.NewFenceServiceClient(conn), cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
}

// watch prints events until ctx ends. When the authority goes away (a
// restart) it watches again, and the new stream starts with a snapshot.
func (o *fenceOptions) watch(ctx context.Context, client fencev1.FenceServiceClient, out, errOut io.Writer) error {
	loop := rewatch.Loop{Backoff: rewatch.Exponential(200*time.Millisecond, 5*time.Second), Clock: o.clock}
	return loop.Run(ctx, func(ctx context.Context, working func()) error {
		return o.watchOnce(ctx, client, out, working)
	}, func(err error, _ bool, wait time.Duration) error {
		if status.Code(err) != codes.Unavailable {
			return fmt.Errorf("watch the fence at %s: %w", o.conn.address, err)
		}
		_, err = fmt.Fprintf(errOut, "authority %s unavailable (%s); watching again in %s\n",
			o.conn.address, status.Convert(err).Message(), wait.Round(time.Millisecond))
		return err
	})
}

func (o *fenceOptions) watchOnce(ctx context.Context, client fencev1.FenceServiceClient, out io.Writer, working func()) error {
	stream, err := client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: o.domain})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		working()
		if err := o.printEvent(out, ev); err != nil {
			return err
		}
	}
}

// client connects to the authority for one call bounded by --timeout.
func (o *fenceOptions) client(ctx context.Context) (fencev1.FenceServiceClient, context.Context, context.CancelFunc, error) {
	if err := o.checkOutput(); err != nil {
		return nil, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	conn, err := o.conn.dial(ctx)
	if err != nil {
		cancel()
		return nil, nil, nil, err
	}
	return fencev1.NewFenceServiceClient(conn), ctx, cancel, nil
}

func (o *fenceOptions) checkOutput() error {
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("--output %q: want table or json", o.output)
	}
	return nil
}

// fenceView is what the commands show of a fence, in both formats; times
// relative to now are computed with the local clock.
type fenceView struct {
	Domain          string        `json:"domain"`
	Holder          *holderView   `json:"holder,omitempty"`
	Pending         *pendingView  `json:"pending,omitempty"`
	LeaseTTLSeconds float64       `json:"lease_ttl_seconds"`
	Revision        int64         `json:"revision"`
	Clusters        []clusterView `json:"clusters"`
}

type holderView struct {
	ClusterName           string         `json:"cluster_name"`
	ClusterUID            string         `json:"cluster_uid"`
	Epoch                 uint64         `json:"epoch"`
	Token                 uint64         `json:"token"`
	Released              bool           `json:"released"`
	AcquireTime           time.Time      `json:"acquire_time"`
	LeaseExpireTime       time.Time      `json:"lease_expire_time"`
	LeaseRemainingSeconds float64        `json:"lease_remaining_seconds"`
	Revoked               bool           `json:"revoked,omitempty"`
	RevokedEpoch          uint64         `json:"revoked_epoch,omitempty"`
	Instances             []instanceView `json:"instances"`
}

// instanceView is the lease of one instance of the holder.
type instanceView struct {
	Instance              string    `json:"instance"`
	Epoch                 uint64    `json:"epoch"`
	Released              bool      `json:"released"`
	Revoked               bool      `json:"revoked,omitempty"`
	LeaseExpireTime       time.Time `json:"lease_expire_time"`
	LeaseRemainingSeconds float64   `json:"lease_remaining_seconds"`
}

type pendingView struct {
	ClusterName string    `json:"cluster_name"`
	ClusterUID  string    `json:"cluster_uid"`
	Epoch       uint64    `json:"epoch"`
	RequestTime time.Time `json:"request_time"`
}

type clusterView struct {
	ClusterName     string    `json:"cluster_name"`
	ClusterUID      string    `json:"cluster_uid"`
	HighestEpoch    uint64    `json:"highest_epoch"`
	LastEpoch       uint64    `json:"last_epoch"`
	LastDeclareTime time.Time `json:"last_declare_time"`
}

func (o *fenceOptions) view(f *fencev1.Fence) fenceView {
	v := fenceView{
		Domain:          f.GetDomain(),
		LeaseTTLSeconds: f.GetLeaseTtl().AsDuration().Seconds(),
		Revision:        f.GetRevision(),
		Clusters:        []clusterView{},
	}
	if h := f.GetHolder(); h != nil {
		v.Holder = &holderView{
			ClusterName:     h.GetClusterName(),
			ClusterUID:      h.GetClusterUid(),
			Epoch:           h.GetEpoch(),
			Token:           h.GetToken(),
			Released:        h.GetReleased(),
			AcquireTime:     h.GetAcquireTime().AsTime(),
			LeaseExpireTime: h.GetLeaseExpireTime().AsTime(),
			Revoked:         h.GetRevoked(),
			RevokedEpoch:    h.GetRevokedEpoch(),
			Instances:       []instanceView{},
		}
		v.Holder.LeaseRemainingSeconds = o.remaining(v.Holder.LeaseExpireTime)
		for _, l := range h.GetInstances() {
			end := l.GetLeaseExpireTime().AsTime()
			v.Holder.Instances = append(v.Holder.Instances, instanceView{
				Instance: l.GetInstance(), Epoch: l.GetEpoch(), Released: l.GetReleased(), Revoked: l.GetRevoked(),
				LeaseExpireTime: end, LeaseRemainingSeconds: o.remaining(end),
			})
		}
	}
	if p := f.GetPending(); p != nil {
		v.Pending = &pendingView{ClusterName: p.GetClusterName(), ClusterUID: p.GetClusterUid(), Epoch: p.GetEpoch(), RequestTime: p.GetRequestTime().AsTime()}
	}
	for _, c := range f.GetClusters() {
		v.Clusters = append(v.Clusters, clusterView{
			ClusterName:     c.GetClusterName(),
			ClusterUID:      c.GetClusterUid(),
			HighestEpoch:    c.GetHighestEpoch(),
			LastEpoch:       c.GetLastEpoch(),
			LastDeclareTime: c.GetLastDeclareTime().AsTime(),
		})
	}
	return v
}

// remaining is how long until end, in seconds; 0 once it passed.
func (o *fenceOptions) remaining(end time.Time) float64 {
	return max(end.Sub(o.clock.Now()), 0).Seconds()
}

// leaseText says where a lease stands at now.
func leaseText(released bool, end, now time.Time, releasedBy string) string {
	left := end.Sub(now)
	switch {
	case released:
		return "released by " + releasedBy
	case left > 0:
		return fmt.Sprintf("ends in %s, at %s", left.Round(100*time.Millisecond), timestamp(end))
	default:
		return fmt.Sprintf("ended %s ago, at %s, without renewal", (-left).Round(100*time.Millisecond), timestamp(end))
	}
}

func (o *fenceOptions) printFence(out io.Writer, f *fencev1.Fence) error {
	v := o.view(f)
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	now := o.clock.Now()
	err := printTable(out, func(w *printer) {
		w.printf("Domain:\t%s\n", v.Domain)
		if h := v.Holder; h != nil {
			w.printf("Holder:\t%s (uid %s) at epoch %d, token %d\n", h.ClusterName, h.ClusterUID, h.Epoch, h.Token)
			w.printf("Acquired:\t%s (%s ago)\n", timestamp(h.AcquireTime), duration.HumanDuration(now.Sub(h.AcquireTime)))
			w.printf("Lease:\t%s\n", leaseText(h.Released, h.LeaseExpireTime, now, "every instance of the holder"))
			if h.Revoked {
				w.printf("Revoked:\tevery lease of %s, at epoch %d: none is renewed until %s declares a higher epoch\n", h.ClusterName, h.RevokedEpoch, h.ClusterName)
			}
		} else {
			w.printf("Holder:\tnone: no cluster declared in this domain yet\n")
		}
		if p := v.Pending; p != nil {
			w.printf("Pending:\t%s (uid %s) at epoch %d, waiting since %s (%s ago)\n", p.ClusterName, p.ClusterUID, p.Epoch,
				timestamp(p.RequestTime), duration.HumanDuration(now.Sub(p.RequestTime)))
		} else {
			w.printf("Pending:\tnone\n")
		}
		w.printf("Lease TTL:\t%s\n", time.Duration(v.LeaseTTLSeconds*float64(time.Second)))
	})
	if err != nil {
		return err
	}
	if h := v.Holder; h != nil && len(h.Instances) > 0 {
		err := printTable(out, func(w *printer) {
			w.printf("\nINSTANCE\tEPOCH\tLEASE\n")
			for _, l := range h.Instances {
				lease := leaseText(l.Released, l.LeaseExpireTime, now, "the instance")
				if l.Revoked {
					lease = "revoked, not renewed; " + lease
				}
				w.printf("%s\t%d\t%s\n", instanceName(l.Instance), l.Epoch, lease)
			}
		})
		if err != nil {
			return err
		}
	}
	if len(v.Clusters) == 0 {
		return nil
	}
	return printTable(out, func(w *printer) {
		w.printf("\nCLUSTER\tUID\tHIGHEST EPOCH\tLAST EPOCH\tLAST DECLARATION\tAGE\n")
		for _, c := range v.Clusters {
			w.printf("%s\t%s\t%d\t%d\t%s\t%s\n", c.ClusterName, c.ClusterUID, c.HighestEpoch, c.LastEpoch,
				timestamp(c.LastDeclareTime), duration.HumanDuration(now.Sub(c.LastDeclareTime)))
		}
	})
}

// printTable writes the lines that rows prints as one table: its own
// tabwriter aligns its columns, independently of the tables around it.
func printTable(out io.Writer, rows func(w *printer)) error {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	w := &printer{w: tw}
	rows(w)
	if w.err != nil {
		return w.err
	}
	return tw.Flush()
}

// printer writes formatted text and keeps the first error, so a long run
// of lines needs one check.
type printer struct {
	w   io.Writer
	err error
}

func (p *printer) printf(format string, args ...any) {
	if p.err == nil {
		_, p.err = fmt.Fprintf(p.w, format, args...)
	}
}

// eventView is one line of `fence watch -o json`.
type eventView struct {
	Time  time.Time  `json:"time"`
	Type  string     `json:"type"`
	Fence fenceView  `json:"fence"`
	Actor *actorView `json:"actor,omitempty"`
}

func (o *fenceOptions) printEvent(out io.Writer, ev *fencev1.WatchFenceResponse) error {
	typ := strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "FENCE_EVENT_TYPE_"))
	v := o.view(ev.GetFence())
	if o.output == "json" {
		return json.NewEncoder(out).Encode(eventView{Time: o.clock.Now(), Type: typ, Fence: v, Actor: viewActor(ev.GetActor())})
	}
	holder, pending := "none", "none"
	if h := v.Holder; h != nil {
		holder = fmt.Sprintf("%s@%d token %d", h.ClusterName, h.Epoch, h.Token)
		if h.Released {
			holder += " (released)"
		}
	}
	if p := v.Pending; p != nil {
		pending = fmt.Sprintf("%s@%d", p.ClusterName, p.Epoch)
	}
	by := ""
	if a := viewActor(ev.GetActor()); a != nil {
		by = "  by " + a.text()
	}
	_, err := fmt.Fprintf(out, "%s  %-15s  holder %s  pending %s%s\n", timestamp(o.clock.Now()), typ, holder, pending, by)
	return err
}

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
