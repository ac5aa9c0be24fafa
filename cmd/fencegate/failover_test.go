package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/failover"
	"github.com/fencegate/fencegate/internal/cli"
	"github.com/fencegate/fencegate/internal/cli/clitest"
)

func TestFailoverFlagErrors(t *testing.T) {
	tests := map[string]struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		"no target":         {wantErr: "--to: required"},
		"from is to":        {args: []string{"--to", "east", "--from", "east"}, wantErr: `--from "east" is --to`},
		"no timeout":        {args: []string{"--to", "east", "--timeout", "0s"}, wantErr: "--timeout 0s: must be positive"},
		"a zero epoch step": {args: []string{"--to", "east", "--max-epoch-step", "0"}, wantErr: "--max-epoch-step 0: want at least 1"},
		"a zero epoch step from the environment": {
			args: []string{"--to", "east"}, env: map[string]string{"FENCEGATE_FAILOVER_MAX_EPOCH_STEP": "0"},
			wantErr: "--max-epoch-step 0: want at least 1",
		},
		"a bad epoch step from the environment names the variable": {
			args: []string{"--to", "east"}, env: map[string]string{"FENCEGATE_FAILOVER_MAX_EPOCH_STEP": "many"},
			wantErr: `FENCEGATE_FAILOVER_MAX_EPOCH_STEP="many" (for --max-epoch-step)`,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, err := clitest.Execute(ctx, newRootCommand(), append([]string{"failover"}, tc.args...)...)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}

func TestFailoverExitCodes(t *testing.T) {
	tests := map[string]struct {
		err  error
		want int
	}{
		"done":                    {err: nil, want: 0},
		"an error before raising": {err: errors.New("read Fence"), want: 1},
		"the timeout":             {err: &failover.TimeoutError{Timeout: time.Minute}, want: exitFailoverTimeout},
		"refused while waiting":   {err: &failover.RefusedError{Refused: failover.Refused{Why: "permission denied"}}, want: exitFailoverRefused},
		"done, but not quiet":     {err: &failover.QuiesceTimeoutError{Timeout: time.Minute, Quiesced: "1 of 2 held objects have not gone quiet"}, want: exitFailoverNotQuiesced},
		"the epoch's step, checked before patching": {
			err:  fmt.Errorf("plan: %w", &failover.StepError{Plan: failover.Plan{Epoch: 5000, Highest: 2}, MaxStep: 1000}),
			want: exitFailoverRefused,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := withFailoverExitCode(tc.err)
			got := 0
			if err != nil {
				got = cli.ExitCode(err)
			}
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("exit %d (%v), want %d with the error", got, err, tc.want)
			}
		})
	}
}
