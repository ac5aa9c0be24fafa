package cli

import (
	"fmt"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"go.uber.org/zap/zapcore"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// LogOptions are the root command's logging flags, shared by every
// subcommand.
type LogOptions struct {
	level  string
	format string
}

func (o *LogOptions) addFlags(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&o.level, "log-level", "info", "log level: debug, info or error")
	cmd.PersistentFlags().StringVar(&o.format, "log-format", "json", "log format: json or console")
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
	var development bool
	switch o.format {
	case "json":
	case "console":
		development = true
	default:
		return logr.Discard(), fmt.Errorf("--log-format %q: want json or console", o.format)
	}
	logger := zap.New(
		zap.WriteTo(cmd.ErrOrStderr()),
		zap.Level(level),
		zap.UseDevMode(development),
		zap.StacktraceLevel(zapcore.PanicLevel),
	)
	// The controller-runtime parts every command may run (the manager,
	// the certificate watchers) log through the same logger; unset, they
	// print a warning with a stack trace instead.
	ctrllog.SetLogger(logger)
	return logger, nil
}
