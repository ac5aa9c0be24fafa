package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Snapshot saves the control plane's etcd, as `etcdctl snapshot save` does,
// into path: what a backup of the cluster holds. A control plane started
// with Options.RestoreFrom set to the file is the cluster restored from that
// backup, with the same kube-system UID, objects and Fence status.
func (cp *ControlPlane) Snapshot(ctx context.Context, path string) error {
	etcd := cp.env.ControlPlane.Etcd
	if etcd == nil || etcd.URL == nil {
		return fmt.Errorf("control plane %q has no etcd to snapshot", cp.Name)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.URL.String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("connect to the etcd of %q: %w", cp.Name, err)
	}
	defer func() { _ = c.Close() }()
	rc, err := c.Snapshot(ctx)
	if err != nil {
		return fmt.Errorf("snapshot the etcd of %q: %w", cp.Name, err)
	}
	defer func() { _ = rc.Close() }()
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create snapshot file: %w", err)
	}
	if _, err := io.Copy(f, rc); err != nil {
		_ = f.Close()
		return fmt.Errorf("save the snapshot of %q to %s: %w", cp.Name, path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("save the snapshot of %q to %s: %w", cp.Name, path, err)
	}
	return f.Close()
}

// restoreEtcd restores snapshot into a new etcd data directory under dir
// with the real `etcdutl snapshot restore`, and has env's etcd start from it.
func restoreEtcd(env *envtest.Environment, assets, snapshot, dir string) error {
	data := filepath.Join(dir, "etcd")
	cmd := exec.Command(filepath.Join(assets, "etcdutl"), "snapshot", "restore", snapshot, "--data-dir", data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("etcdutl snapshot restore %s (built by `hack/build-tools.sh etcd`): %w: %s", snapshot, err, out)
	}
	if env.ControlPlane.Etcd == nil {
		env.ControlPlane.Etcd = &envtest.Etcd{}
	}
	env.ControlPlane.Etcd.DataDir = data
	return nil
}
