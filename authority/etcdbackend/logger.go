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

// irrelevant are etcd warnings that do not apply to how the authority runs
// etcd (an embedded etcd with no listener and no etcd users), and that
// would only worry an operator.
var irrelevant = map[string]bool{
	"Running http and grpc server on single port. This is not recommended for production.": true,
	"simple token is not cryptographically signed":                                         true,
}

// zapLogger returns the zap logger behind log (etcd logs through zap), at
// no lower than minLevel: etcd is chatty at info level, and its client warns
// on every retried call. A logger not backed by zap gets nothing.
func zapLogger(log logr.Logger, minLevel zapcore.Level) *zap.Logger {
	underlier, ok := log.GetSink().(zapr.Underlier)
	if !ok {
		return zap.NewNop()
	}
	return underlier.GetUnderlying().WithOptions(
		zap.IncreaseLevel(minLevel),
		zap.WrapCore(func(c zapcore.Core) zapcore.Core { return filterCore{c} }),
	)
}

// filterCore drops the irrelevant messages.
type filterCore struct{ zapcore.Core }

func (f filterCore) With(fields []zapcore.Field) zapcore.Core { return filterCore{f.Core.With(fields)} }

func (f filterCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if irrelevant[e.Message] {
		return ce
	}
	return f.Core.Check(e, ce)
}
