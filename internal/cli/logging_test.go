package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// stoppedClock gives every entry the same time, so that all of a test's
// lines fall in one sampling tick however slow the machine.
type stoppedClock struct{ at time.Time }

func (c stoppedClock) Now() time.Time                         { return c.at }
func (c stoppedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

func TestLogSampling(t *testing.T) {
	const repeated = 250
	tests := []struct {
		name    string
		console bool
		// written is how many of the repeated lines reach the log.
		written int
	}{
		// The first 100 of the tick, then the 200th.
		{name: "json samples", console: false, written: sampledFirst + (repeated-sampledFirst)/sampledThereafter},
		{name: "console writes every line", console: true, written: repeated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			o := &LogOptions{}
			log := zapr.NewLogger(o.newZapLogger(&out, zapcore.InfoLevel, tt.console, zap.WithClock(stoppedClock{at: time.Unix(1e9, 0)})))
			for i := range repeated {
				log.Info("admission decision", "i", i)
			}
			log.Info("another message")
			log.Error(nil, "an error")

			lines := strings.Count(out.String(), "\n")
			decisions := strings.Count(out.String(), "admission decision")
			if decisions != tt.written || lines != tt.written+2 {
				t.Errorf("wrote %d decision lines and %d lines in all, want %d and %d:\n%s", decisions, lines, tt.written, tt.written+2, out.String())
			}
			dropped := o.droppedLines()
			if got, want := testutil.ToFloat64(dropped.WithLabelValues("info")), float64(repeated-tt.written); got != want {
				t.Errorf("fencegate_log_lines_dropped_total{level=info} = %v, want %v", got, want)
			}
			if got := testutil.ToFloat64(dropped.WithLabelValues("error")); got != 0 {
				t.Errorf("fencegate_log_lines_dropped_total{level=error} = %v, want 0", got)
			}
		})
	}
}
