package etcdbackend

import (
	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const (
	levelWarn  = zapcore.WarnLevel
	levelError = zapcore.ErrorLevel
)

// zapLogger returns the zap logger behind log (etcd logs through zap), at
// no lower than min: etcd is chatty at info level, and its client warns on
// every retried call. A logger not backed by zap gets nothing.
func zapLogger(log logr.Logger, minLevel zapcore.Level) *zap.Logger {
	underlier, ok := log.GetSink().(zapr.Underlier)
	if !ok {
		return zap.NewNop()
	}
	return underlier.GetUnderlying().WithOptions(zap.IncreaseLevel(minLevel))
}
