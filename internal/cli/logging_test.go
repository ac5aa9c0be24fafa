package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/spf13/cobra"
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

// TestLoggerCountsWhatMetricsServes: the logger the commands build counts
// what it drops in the collector Metrics returns, which the binaries
// register.
func TestLoggerCountsWhatMetricsServes(t *testing.T) {
	var out bytes.Buffer
	cmd := &cobra.Command{}
	cmd.SetErr(&out)
	o := &LogOptions{level: "info", format: "json"}
	log, err := o.Logger(cmd)
	if err != nil {
		t.Fatal(err)
	}
	// However the lines fall into ticks, one tick gets far more than
	// sampledFirst of them.
	for i := range 20 * sampledFirst {
		log.Info("admission decision", "i", i)
	}
	counter, ok := o.Metrics().(interface {
		WithLabelValues(...string) prometheus.Counter
	})
	if !ok {
		t.Fatalf("Metrics() is a %T, not the dropped lines' counter", o.Metrics())
	}
	written := strings.Count(out.String(), "\n")
	dropped := testutil.ToFloat64(counter.WithLabelValues("info"))
	if dropped == 0 || written+int(dropped) != 20*sampledFirst {
		t.Errorf("wrote %d lines and counted %v dropped, want some dropped and %d in all", written, dropped, 20*sampledFirst)
	}
}
