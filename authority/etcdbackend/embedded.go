package etcdbackend

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// compactionRetention is how much history the embedded etcd keeps. Every
// declaration writes a revision, so history must be compacted; watchers
// that fall further behind read the fence again.
const compactionRetention = "10m"

// EmbeddedOptions configure an embedded etcd.
type EmbeddedOptions struct {
	// Dir holds etcd's data; it is created if missing.
	Dir string
	// Logger receives etcd's warnings and errors.
	Logger logr.Logger
}

// Embedded is an etcd server running inside this process. It listens on no
// port: the authority reaches it through in-process calls, so no other
// process on the machine can change the fence behind its back.
type Embedded struct {
	etcd   *embed.Etcd
	client *clientv3.Client
}

// StartEmbedded starts an embedded single-node etcd on opts.Dir and waits
// until it serves, or ctx ends.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	if opts.Dir == "" {
		return nil, fmt.Errorf("embedded etcd needs a data directory")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", opts.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "fencegate-authority"
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.ListenClientHttpUrls, cfg.ListenPeerUrls = nil, nil, nil
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = embed.CompactorModePeriodic, compactionRetention
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapLogger(opts.Logger.WithName("etcd"), levelWarn))

	type started struct {
		etcd *embed.Etcd
		err  error
	}
	// StartEtcd blocks while another process holds the data directory's
	// lock: wait for it in the background so ctx can cut the wait short.
	done := make(chan started, 1)
	go func() {
		e, err := embed.StartEtcd(cfg)
		done <- started{e, err}
	}()
	var e *embed.Etcd
	select {
	case s := <-done:
		if s.err != nil {
			return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, s.err)
		}
		e = s.etcd
	case <-ctx.Done():
		go func() {
			if s := <-done; s.etcd != nil {
				s.etcd.Close()
			}
		}()
		return nil, fmt.Errorf("start embedded etcd in %s (is another authority using it?): %w", dir, ctx.Err())
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s: %w", dir, err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("wait for embedded etcd in %s: %w", dir, ctx.Err())
	}
	return &Embedded{etcd: e, client: v3client.New(e.Server)}, nil
}

// Client returns the client of the embedded etcd; it is closed by Close.
func (e *Embedded) Client() *clientv3.Client { return e.client }

// Dir returns the data directory.
func (e *Embedded) Dir() string { return e.etcd.Config().Dir }

// Close stops the client and the server; the data stays in the directory.
func (e *Embedded) Close() {
	_ = e.client.Close()
	e.etcd.Close()
}
