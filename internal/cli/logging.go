package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlzap "sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// The json format samples: of the lines with one level and message, it
// writes the first sampledFirst in each sampleTick and every
// sampledThereafter-th after that, so that a storm of one message (a
// controller retrying thousands of refused writes a second) cannot flood
// a log pipeline (zap counts by a hash of level and message, so two
// messages may now and then share a count). The console format, for people
// reading, writes every line.
const (
	sampleTick        = time.Second
	sampledFirst      = 100
	sampledThereafter = 100
)

// JSONLogSampling says in words what the json format writes.
const JSONLogSampling = "of the lines of one message, the first 100 each second and every 100th after that"

// LogOptions are the root command's logging flags, shared by every
// subcommand.
type LogOptions struct {
	level  string
	format string
	// dropped counts the lines that sampling did not write, by level.
	dropped *prometheus.CounterVec
}

func (o *LogOptions) addFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&o.level, "log-level", "info", "log level: debug, info or error")
	cmd.PersistentFlags().StringVar(&o.format, "log-format", "json", "log format: json ("+JSONLogSampling+") or console (every line)")
}

// Metrics counts the log lines that the json format's sampling did not
// write (fencegate_log_lines_dropped_total, by level): a daemon registers
// it with its other metrics, so that a log that lacks lines says so.
func (o *LogOptions) Metrics() prometheus.Collector { return o.droppedLines() }

func (o *LogOptions) droppedLines() *prometheus.CounterVec {
	if o.dropped == nil {
		o.dropped = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fencegate_log_lines_dropped_total",
			Help: fmt.Sprintf("Log lines not written because more than %d lines of one level and message came within %s (every %dth of them is written).",
				sampledFirst, sampleTick, sampledThereafter),
		}, []string{"level"})
		for _, level := range []zapcore.Level{zapcore.DebugLevel, zapcore.InfoLevel, zapcore.ErrorLevel} {
			o.dropped.WithLabelValues(level.String())
		}
	}
	return o.dropped
}

// Logger builds the structured logger that every component logs through.
func (o *LogOptions) Logger(cmd *cobra.Command) (logr.Logger, error) {
	var level zapcore.Level
	switch o.level {
	case "debug":
		level = zapcore.DebugLevel
	case "info":
		level = zapcore.InfoLevel
	case "error":
		level = zapcore.ErrorLevel
	default:
		return logr.Discard(), fmt.Errorf("--log-level %q: want debug, info or error", o.level)
	}
	var console bool
	switch o.format {
	case "json":
	case "console":
		console = true
	default:
		return logr.Discard(), fmt.Errorf("--log-format %q: want json or console", o.format)
	}
	logger := zapr.NewLogger(o.newZapLogger(cmd.ErrOrStderr(), level, console))
	// The controller-runtime parts every command may run (the manager,
	// the certificate watchers) log through the same logger; unset, they
	// print a warning with a stack trace instead.
	ctrllog.SetLogger(logger)
	return logger, nil
}

// newZapLogger writes to w what controller-runtime's zap logger would
// (its encoders, RFC 3339 times, stack traces only for panics), with the
// json format's sampling counted in Metrics.
func (o *LogOptions) newZapLogger(w io.Writer, level zapcore.Level, console bool, options ...zap.Option) *zap.Logger {
	sink := zapcore.AddSync(w)
	options = append(options, zap.ErrorOutput(sink), zap.AddStacktrace(zapcore.PanicLevel))
	var encoder zapcore.Encoder
	if console {
		config := zap.NewDevelopmentEncoderConfig()
		config.EncodeTime = zapcore.RFC3339TimeEncoder
		encoder = zapcore.NewConsoleEncoder(config)
		options = append(options, zap.Development())
	} else {
		config := zap.NewProductionEncoderConfig()
		config.EncodeTime = zapcore.RFC3339TimeEncoder
		encoder = zapcore.NewJSONEncoder(config)
	}
	core := zapcore.NewCore(&ctrlzap.KubeAwareEncoder{Encoder: encoder, Verbose: console}, sink, level)
	if !console {
		dropped := o.droppedLines()
		core = zapcore.NewSamplerWithOptions(core, sampleTick, sampledFirst, sampledThereafter,
			zapcore.SamplerHook(func(entry zapcore.Entry, decision zapcore.SamplingDecision) {
				if decision&zapcore.LogDropped != 0 {
					dropped.WithLabelValues(entry.Level.String()).Inc()
				}
			}))
	}
	return zap.New(core, options...)
}
