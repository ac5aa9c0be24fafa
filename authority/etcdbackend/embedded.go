package etcdbackend

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	"go.etcd.io/etcd/client/pkg/v3/fileutil"
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
	// Dir is the authority's data directory, created if missing: etcd keeps
	// its data in Dir/etcd, and Dir/authority.lock keeps a second authority
	// from opening the same data.
	Dir string
	// Logger receives etcd's warnings and errors.
	Logger logr.Logger
}

// Embedded is an etcd server running inside this process. It listens on no
// port: the authority reaches it through in-process calls, so no other
// process on the machine can change the fence behind its back.
type Embedded struct {
	dir    string
	lock   *fileutil.LockedFile
	etcd   *embed.Etcd
	client *clientv3.Client
}

// StartEmbedded starts an embedded single-node etcd on opts.Dir and waits
// until it serves, or ctx ends.
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	if opts.Dir == "" {
		return nil, errors.New("embedded etcd needs a data directory")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", opts.Dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	lock, err := fileutil.TryLockFile(filepath.Join(dir, "authority.lock"), os.O_CREATE|os.O_WRONLY, 0o600)
	if errors.Is(err, fileutil.ErrLocked) {
		return nil, fmt.Errorf("data directory %s is in use by another fence authority", dir)
	}
	if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w", dir, err)
	}
	e, err := startEtcd(ctx, filepath.Join(dir, "etcd"), opts.Logger)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	return &Embedded{dir: dir, lock: lock, etcd: e, client: v3client.New(e.Server)}, nil
}

func startEtcd(ctx context.Context, dir string, log logr.Logger) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "fencegate-authority"
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.ListenClientHttpUrls, cfg.ListenPeerUrls = nil, nil, nil
	cfg.AutoCompactionMode, cfg.AutoCompactionRetention = embed.CompactorModePeriodic, compactionRetention
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapLogger(log.WithName("etcd"), levelWarn))
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s: %w", dir, err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("wait for embedded etcd in %s: %w", dir, ctx.Err())
	}
}

// Client returns the client of the embedded etcd; it is closed by Close.
func (e *Embedded) Client() *clientv3.Client { return e.client }

// Dir returns the absolute data directory.
func (e *Embedded) Dir() string { return e.dir }

// Close stops the client and the server and unlocks the data directory;
// the data stays.
func (e *Embedded) Close() {
	_ = e.client.Close()
	e.etcd.Close()
	_ = e.lock.Close()
}
