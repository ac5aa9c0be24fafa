package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/cmd/fencegate/internal/fenceprint"
	"github.com/fencegate/fencegate/internal/rewatch"
)

func (o *fenceOptions) watchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch",
		Short: "Print the fence, then each change of holder, pending takeover or release, until interrupted",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := fenceprint.New(o.output, cmd.OutOrStdout(), o.clock)
			if err != nil {
				return err
			}
			conn, err := o.conn.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer func() { _ = conn.Close() }()
			return o.watch(cmd.Context(), fencev1.NewFenceServiceClient(conn), p, cmd.ErrOrStderr())
		},
	}
}

// watch prints events until ctx ends. When the authority goes away (a
// restart) it watches again, and the new stream starts with a snapshot.
func (o *fenceOptions) watch(ctx context.Context, client fencev1.FenceServiceClient, p fenceprint.Printer, errOut io.Writer) error {
	loop := rewatch.Loop{Backoff: rewatch.Exponential(200*time.Millisecond, 5*time.Second), Clock: o.clock}
	open := func(ctx context.Context) (rewatch.Stream[*fencev1.WatchFenceResponse], error) {
		return client.WatchFence(ctx, &fencev1.WatchFenceRequest{Domain: o.domain})
	}
	return loop.Run(ctx, rewatch.Messages(open, p.Event), func(err error, _ bool, wait time.Duration) error {
		if status.Code(err) != codes.Unavailable {
			return fmt.Errorf("watch the fence at %s: %w", o.conn.address, err)
		}
		_, err = fmt.Fprintf(errOut, "authority %s unavailable (%s); watching again in %s\n",
			o.conn.address, status.Convert(err).Message(), wait.Round(time.Millisecond))
		return err
	})
}
