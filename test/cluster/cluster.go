package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// AssetsEnv names the environment variable that points at the directory
// holding kube-apiserver, etcd and kubectl. Without it the project's tool
// cache (.cache/bin at the module root) is used.
const AssetsEnv = "FENCEGATE_TEST_ASSETS"

// Options configure a control plane.
type Options struct {
	// Name labels the control plane in logs, kubeconfig contexts and temp
	// directory names ("east", "west", …).
	Name string
	// CRDs lists directories or files of CustomResourceDefinitions to install
	// before Start returns. Empty means the project's config/crd.
	CRDs []string
	// NoCRDs skips installing any CustomResourceDefinition.
	NoCRDs bool
	// Webhooks, if set, are installed by the control plane with a generated
	// serving certificate (see envtest.WebhookInstallOptions).
	Webhooks *envtest.WebhookInstallOptions
	// Configure, if set, adjusts the environment before it starts. The node
	// harness (test/node) uses it to serve the API server on an address pods
	// reach, with a certificate for its Service IP.
	Configure func(*envtest.Environment) error
	// RestoreFrom, if set, is an etcd snapshot (see ControlPlane.Snapshot):
	// the control plane starts from it, as a cluster restored from a backup
	// does, instead of from an empty etcd.
	RestoreFrom string
	// AuditLog makes the API server log every request it answers, for
	// AuditEvents.
	AuditLog bool
}

// ControlPlane is a running kube-apiserver with its own etcd.
type ControlPlane struct {
	// Name is the control plane's label.
	Name string
	// Config reaches the API server as a cluster admin.
	Config *rest.Config
	// Client is a controller-runtime client with the core and fencegate types.
	Client client.Client
	// Scheme holds the core and fencegate types.
	Scheme *runtime.Scheme
	// Kubeconfig is the path of an admin kubeconfig file for kubectl.
	Kubeconfig string
	// Dir is a temporary directory owned by the control plane, removed by
	// Stop.
	Dir string
	// Assets is the directory of the control-plane binaries (kubectl too).
	Assets string

	env      *envtest.Environment
	auditLog string
}

// Start starts a control plane and waits until it serves requests and the
// CRDs are established.
func Start(opts Options) (*ControlPlane, error) {
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	name := opts.Name
	if name == "" {
		name = "cluster"
	}
	crds := opts.CRDs
	if len(crds) == 0 && !opts.NoCRDs {
		root, err := ModuleRoot()
		if err != nil {
			return nil, err
		}
		crds = []string{filepath.Join(root, "config", "crd")}
	}
	if opts.NoCRDs {
		crds = nil
	}

	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register core types: %w", err)
	}
	if err := fencegatev1alpha1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register fencegate types: %w", err)
	}

	dir, err := os.MkdirTemp("", "fencegate-"+name+"-")
	if err != nil {
		return nil, fmt.Errorf("create control plane directory: %w", err)
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory:    assets,
		CRDDirectoryPaths:        crds,
		ErrorIfCRDPathMissing:    len(crds) > 0,
		Scheme:                   scheme,
		AttachControlPlaneOutput: os.Getenv("FENCEGATE_TEST_CONTROL_PLANE_OUTPUT") != "",
	}
	if opts.Webhooks != nil {
		env.WebhookInstallOptions = *opts.Webhooks
	}
	if opts.RestoreFrom != "" {
		if err := restoreEtcd(env, assets, opts.RestoreFrom, dir); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("restore control plane %q: %w", name, err)
		}
	}
	var auditLog string
	if opts.AuditLog {
		if auditLog, err = auditFlags(env, dir); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("control plane %q: %w", name, err)
		}
	}
	if opts.Configure != nil {
		if err := opts.Configure(env); err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("configure control plane %q: %w", name, err)
		}
	}
	// controller-runtime's loggers (envtest's, and those of controllers
	// the tests run in process) log nothing, as before a logger is set,
	// without warning that none was.
	ctrllog.SetLogger(logr.Discard())
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("start control plane %q with binaries from %s: %w", name, assets, err)
	}
	cp := &ControlPlane{Name: name, Config: cfg, Scheme: scheme, Dir: dir, Assets: assets, env: env, auditLog: auditLog}
	if opts.Webhooks != nil {
		*opts.Webhooks = env.WebhookInstallOptions
	}
	if cp.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("client for control plane %q: %w", name, err)
	}
	kubeconfig, err := renameContext(env.KubeConfig, name)
	if err != nil {
		_ = cp.Stop()
		return nil, err
	}
	cp.Kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(cp.Kubeconfig, kubeconfig, 0o600); err != nil {
		_ = cp.Stop()
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return cp, nil
}

// StartForTest starts a control plane that stops when the test ends. It
// skips the test under -short and when the binaries are not built
// (RequireControlPlane), and fails it if the control plane cannot start.
func StartForTest(t testing.TB, opts Options) *ControlPlane {
	t.Helper()
	RequireControlPlane(t)
	if opts.Name == "" {
		opts.Name = strings.ToLower(strings.NewReplacer("/", "-", " ", "-").Replace(t.Name()))
	}
	cp, err := Start(opts)
	if err != nil {
		t.Fatalf("control plane: %v", err)
	}
	t.Cleanup(func() {
		if err := cp.Stop(); err != nil {
			t.Errorf("stop control plane %q: %v", cp.Name, err)
		}
	})
	return cp
}

// Stop stops the API server and etcd and removes every temporary directory.
func (cp *ControlPlane) Stop() error {
	err := cp.env.Stop()
	return errors.Join(err, os.RemoveAll(cp.Dir))
}

// AddUser provisions a user with the given groups (e.g. system:masters) and
// writes a kubeconfig for it into the control plane's directory; it returns
// the kubeconfig's path and a rest.Config for the user.
func (cp *ControlPlane) AddUser(name string, groups ...string) (string, *rest.Config, error) {
	user, err := cp.env.AddUser(envtest.User{Name: name, Groups: groups}, nil)
	if err != nil {
		return "", nil, fmt.Errorf("add user %q: %w", name, err)
	}
	raw, err := user.KubeConfig()
	if err != nil {
		return "", nil, fmt.Errorf("kubeconfig of user %q: %w", name, err)
	}
	raw, err = renameContext(raw, cp.Name)
	if err != nil {
		return "", nil, err
	}
	path := filepath.Join(cp.Dir, "kubeconfig-"+strings.NewReplacer(":", "-", "/", "-").Replace(name))
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		return "", nil, fmt.Errorf("write kubeconfig of user %q: %w", name, err)
	}
	return path, user.Config(), nil
}

// KubeSystemUID returns the UID of the kube-system Namespace: the cluster's
// identity in the fence protocol.
func (cp *ControlPlane) KubeSystemUID(ctx context.Context) (string, error) {
	var ns corev1.Namespace
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: metav1.NamespaceSystem}, &ns); err != nil {
		return "", fmt.Errorf("get namespace kube-system: %w", err)
	}
	return string(ns.UID), nil
}

// KubectlResult is what one kubectl run printed.
type KubectlResult struct {
	Stdout, Stderr string
	ExitCode       int
}

// Kubectl runs the real kubectl against the control plane with the admin
// kubeconfig. stdin, if not nil, is handed to kubectl (for `apply -f -`).
// A non-zero exit is reported in the result, not as an error; the error is
// for kubectl failing to run at all.
func (cp *ControlPlane) Kubectl(ctx context.Context, stdin []byte, args ...string) (KubectlResult, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(cp.Assets, "kubectl"), append([]string{"--kubeconfig", cp.Kubeconfig}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	res := KubectlResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case errors.As(err, &exitErr):
		res.ExitCode = exitErr.ExitCode()
	case err != nil:
		return res, fmt.Errorf("run kubectl %s: %w", strings.Join(args, " "), err)
	}
	return res, nil
}
