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

	"github.com/cenkalti/backoff/v5"
	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/utils/clock"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fenceagent"
)

// fenceOptions are the flags shared by the fence subcommands.
type fenceOptions struct {
	conn    authorityClientOptions
	domain  string
	output  string
	timeout time.Duration
	// clock tells how long ago things happened and how much lease is left.
	clock clock.PassiveClock
}

func newFenceCommand() *cobra.Command { return newFenceCommandWithClock(clock.RealClock{}) }

// newFenceCommandWithClock lets tests show times against the clock of a
// test authority.
func newFenceCommandWithClock(clk clock.PassiveClock) *cobra.Command {
	o := &fenceOptions{clock: clk}
	cmd := &cobra.Command{
		Use:   "fence",
		Short: "Look at, watch or release the fence of a fence authority",
		Args:  cobra.NoArgs,
	}
	fs := cmd.PersistentFlags()
	o.conn.addFlags(fs)
	fs.StringVar(&o.domain, "domain", fenceagent.DefaultDomain, "domain of the fence")
	fs.StringVarP(&o.output, "output", "o", "table", "output format: table or json")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long a status or release call may take")
	cmd.AddCommand(o.statusCommand(), o.releaseCommand(), o.watchCommand())
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
	var uid, instance string
	var epoch uint64
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Release the lease of one instance of the holder, e.g. to hand the fence over to a pending takeover",
		Long: `Release the lease of one instance of the holder. Every process of the holding
cluster (each fencegate pod) is an instance with a lease of its own, and the
fence moves to another cluster only once each instance released its lease or
the lease ended; "fence status" lists them. The holder's agents normally release
by themselves when they are told a takeover is pending, or when they stop; run
this by hand for an instance whose process is gone, or for a planned handover
once the holder's cluster has stopped changing its Components. A pending
takeover is granted on its next declaration once no instance holds a lease.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if uid == "" || epoch == 0 {
				return errors.New("--cluster-uid and --epoch name the holder that releases: both are required")
			}
			client, ctx, cancel, err := o.client(cmd.Context())
			if err != nil {
				return err
			}
			defer cancel()
			resp, err := client.ReleaseFence(ctx, &fencev1.ReleaseFenceRequest{Domain: o.domain, ClusterUid: uid, Epoch: epoch, Instance: instance})
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
	cmd.Flags().StringVar(&uid, "cluster-uid", "", "UID of the holding cluster (its kube-system Namespace's UID)")
	cmd.Flags().Uint64Var(&epoch, "epoch", 0, "the epoch the instance declared")
	cmd.Flags().StringVar(&instance, "instance", "", `the instance whose lease is released, as "fence status" lists it (a fencegate pod's name); empty is the instance of clients that name none`)
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
	retry := backoff.NewExponentialBackOff()
	retry.InitialInterval, retry.MaxInterval = 200*time.Millisecond, 5*time.Second
	for {
		err := o.watchOnce(ctx, client, out, retry)
		switch {
		case ctx.Err() != nil:
			return nil
		case status.Code(err) != codes.Unavailable:
			return fmt.Errorf("watch the fence at %s: %w", o.conn.address, err)
		}
		wait := retry.NextBackOff()
		if _, err := fmt.Fprintf(errOut, "authority %s unavailable (%s); watching again in %s\n",
			o.conn.address, status.Convert(err).Message(), wait.Round(time.Millisecond)); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

func (o *fenceOptions) watchOnce(ctx context.Context, client fencev1.FenceServiceClient, out io.Writer, retry *backoff.ExponentialBackOff) error {
	stream, err := client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: o.domain})
	if err != nil {
		return err
	}
	for {
		ev, err := stream.Recv()
		if err != nil {
			return err
		}
		retry.Reset()
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
	Instances             []instanceView `json:"instances"`
}

// instanceView is the lease of one instance of the holder.
type instanceView struct {
	Instance              string    `json:"instance"`
	Epoch                 uint64    `json:"epoch"`
	Released              bool      `json:"released"`
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
			Instances:       []instanceView{},
		}
		v.Holder.LeaseRemainingSeconds = o.remaining(v.Holder.LeaseExpireTime)
		for _, l := range h.GetInstances() {
			end := l.GetLeaseExpireTime().AsTime()
			v.Holder.Instances = append(v.Holder.Instances, instanceView{
				Instance: l.GetInstance(), Epoch: l.GetEpoch(), Released: l.GetReleased(),
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
				w.printf("%s\t%d\t%s\n", instanceName(l.Instance), l.Epoch, leaseText(l.Released, l.LeaseExpireTime, now, "the instance"))
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
	Time  time.Time `json:"time"`
	Type  string    `json:"type"`
	Fence fenceView `json:"fence"`
}

func (o *fenceOptions) printEvent(out io.Writer, ev *fencev1.WatchFenceResponse) error {
	typ := strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "FENCE_EVENT_TYPE_"))
	v := o.view(ev.GetFence())
	if o.output == "json" {
		return json.NewEncoder(out).Encode(eventView{Time: o.clock.Now(), Type: typ, Fence: v})
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
	_, err := fmt.Fprintf(out, "%s  %-15s  holder %s  pending %s\n", timestamp(o.clock.Now()), typ, holder, pending)
	return err
}

func timestamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
