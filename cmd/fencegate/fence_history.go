package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/cmd/fencegate/internal/fenceprint"
)

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
			return o.call(cmd, func(ctx context.Context, c fencev1.FenceServiceClient, p fenceprint.Printer) error {
				resp, err := c.GetFenceHistory(ctx, req)
				if err != nil {
					return fmt.Errorf("read the fence history at %s: %w", o.conn.address, err)
				}
				return p.History(o.domain, resp.GetEvents())
			})
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
