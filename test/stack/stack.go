package stack

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/internal/tcpproxy"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/proc"
)

// Namespace is where each cluster's fencegate keeps its leader election
// Lease, as the chart's release namespace.
const Namespace = "fencegate-system"

// ControllerUser is who fencegate acts as in each cluster, as the chart runs
// it under its service account: only this user may write Component status
// on a fenced cluster.
const ControllerUser = "system:serviceaccount:" + Namespace + ":fencegate"

// configFile is data.fencegate.config: the shipped defaults, with
// fencegate's own user allowed to write Component status.
const configFile = `enforcement: deny
controller_users:
  - ` + ControllerUser + `
`

// ClusterSpec names a cluster and the epoch its fencegate starts with.
type ClusterSpec struct {
	Name  string
	Epoch uint64
	// Replicas is how many `fencegate run` processes serve the cluster,
	// as the chart's replicas; 0 means 1. The API server calls the first
	// one's webhook; the others serve theirs on ports of their own.
	Replicas int
	// Label names the control plane, its kubeconfig context and its
	// processes' logs; empty means Name. A copy of a cluster (restored from
	// a backup) has the cluster's Name and a Label of its own.
	Label string
	// RestoreFrom, if set, is an etcd snapshot of a cluster's control
	// plane (cluster.ControlPlane.Snapshot): the control plane starts from
	// it, as a cluster restored from that backup.
	RestoreFrom string
}

// label is the name the stack knows the cluster by.
func (c ClusterSpec) label() string {
	if c.Label != "" {
		return c.Label
	}
	return c.Name
}

// Options configure a stack.
type Options struct {
	// Binary is the fencegate binary (see Build); the authority runs
	// AuthorityBinary(Binary).
	Binary string
	// Dir receives logs, kubeconfigs and the authority's data. It is the
	// caller's: Stop leaves it, so that the logs outlive a failure.
	Dir string
	// Clusters are started in order, each fencegate ready before the next
	// cluster starts, so the first one declares first.
	Clusters []ClusterSpec
	// LeaseTTL is the authority's lease; zero means its default (15s).
	LeaseTTL time.Duration
	// Authority, if set, is the host:port of a plaintext authority that
	// runs elsewhere (in a cluster of the node test): the stack starts none
	// and its clusters declare there.
	Authority string
	// MTLS serves the authority with TLS, client certificates and an
	// authorization file (see PKI): each cluster declares with a client
	// certificate of its own identity, and the stack's client is the
	// operator.
	MTLS bool
	// Domains are the fence domains every cluster serves beside the
	// default one (--domains).
	Domains []string
	// InstanceLease is each fencegate process's Lease
	// (--instance-lease-duration); zero means its default (15s).
	InstanceLease time.Duration
	// AuthorityFlags are more flags for the authority the stack starts,
	// e.g. a short --cluster-generation-period.
	AuthorityFlags []string
	// ExemptGroups are exempt from the fence (data.fencegate.config's
	// exempt_groups): their changes are admitted, marked, on a fenced
	// cluster.
	ExemptGroups []string
	// AuditLog makes each control plane log every request it answers
	// (cluster.Options.AuditLog).
	AuditLog bool
	// CRDs are more CustomResourceDefinition files or directories every
	// cluster's control plane installs, beside fencegate's own
	// (config/crd): those of the actuators HoldKinds names, say.
	CRDs []string
	// HoldKinds are the resources fencegate holds (--hold-kinds,
	// resource.group); HoldQuietFor is --hold-quiet-for (its default
	// when zero).
	HoldKinds    []string
	HoldQuietFor time.Duration
	// FencedKinds are the kinds fenced like Components
	// (data.fencegate.config's fenced_kinds, and the webhooks' rules), each
	// with its resource.
	FencedKinds []FencedKind
	// Profiling serves each `fencegate run`'s Go profiles on a loopback
	// address of its own (--pprof-address, Replica.Pprof).
	Profiling bool
	// LogFormat is each `fencegate run`'s --log-format; empty means
	// console, which writes every line (the chart's default, json, samples
	// repeated ones).
	LogFormat string
	// AuthorityProxies puts a TCP proxy of its own between each `fencegate
	// run` process and the authority (Replica.AuthorityProxy), so that a
	// test can cut one cluster off from the authority while its API
	// server, and everyone else, still reach theirs.
	AuthorityProxies bool
	// Say reports progress; nil is quiet.
	Say func(format string, args ...any)
}

// FencedKind is a kind fenced like Components, and its resource.
type FencedKind struct {
	Group, Kind, Resource string
}

// Stack is a running authority and its clusters.
type Stack struct {
	// Binary is the fencegate binary the clusters' processes run; the
	// authority runs AuthorityBinary(Binary).
	Binary string
	// Dir holds logs, kubeconfigs and the authority's data.
	Dir string
	// AuthorityAddr is the authority's gRPC address.
	AuthorityAddr string
	// Authority is the authority process.
	Authority *proc.Process
	// Fence is a client of the authority (the operator, with MTLS).
	Fence fencev1.FenceServiceClient
	// PKI holds the certificates and the authorization file with MTLS;
	// nil otherwise.
	PKI *PKI
	// Clusters are the clusters, in the order of Options.Clusters.
	Clusters []*Cluster
	// Kubeconfig is an admin kubeconfig with one context per cluster,
	// named after it, as an operator's who manages both.
	Kubeconfig string

	opts            Options
	authorityHealth string
	conn            *grpc.ClientConn
}

// Cluster is one cluster: a real control plane and the fencegate serving it.
type Cluster struct {
	// Name is the cluster's name.
	Name string
	// Label is the name the stack knows it by: its kubeconfig context and
	// its processes' logs (Name, unless a copy of a cluster has its own).
	Label string
	// Epoch is the epoch its fencegate starts with (--epoch).
	Epoch uint64
	// ControlPlane is the cluster's API server.
	ControlPlane *cluster.ControlPlane
	// Run is the cluster's first `fencegate run` process, the one the API
	// server calls; Health and Metrics are its addresses. Replicas holds
	// every process, Run's first.
	Run *proc.Process
	// Health is the address of its /healthz and /readyz.
	Health string
	// Kubeconfig is fencegate's own kubeconfig (as ControllerUser).
	Kubeconfig string
	// WebhookAddr is where fencegate serves admission over TLS (host:port),
	// and WebhookCA the PEM CA that its serving certificate chains to.
	WebhookAddr string
	WebhookCA   []byte
	// Metrics is the address of its /metrics.
	Metrics string
	// Replicas are the cluster's `fencegate run` processes.
	Replicas []*Replica

	webhooks *envtest.WebhookInstallOptions
	// started counts the processes started, to name their logs.
	started int
}

// Replica is one `fencegate run` process of a cluster.
type Replica struct {
	// Run is the process.
	Run *proc.Process
	// Health, Metrics and Webhook are the addresses it serves; Pprof is
	// where its Go profiles are, with Options.Profiling.
	Health, Metrics, Webhook, Pprof string
	// AuthorityProxy, with Options.AuthorityProxies, is the proxy through
	// which the process reaches the authority: Cut partitions it from the
	// authority, Restore heals the partition.
	AuthorityProxy *tcpproxy.Proxy
}

// BinaryEnv names the environment variable that points at a fencegate
// binary already built, with fencegate-authority beside it: make test builds
// them once and every test package runs them, instead of each linking its
// own.
const BinaryEnv = "FENCEGATE_TEST_BINARY"

// Build returns the fencegate binary named by $FENCEGATE_TEST_BINARY, or
// without it compiles fencegate and fencegate-authority into dir, with
// hack/build-fencegate.sh as `make build` and the image do, and returns the
// path of fencegate. AuthorityBinary gives fencegate-authority's.
func Build(ctx context.Context, dir string) (string, error) {
	if bin := os.Getenv(BinaryEnv); bin != "" {
		for _, b := range []string{bin, AuthorityBinary(bin)} {
			if _, err := os.Stat(b); err != nil {
				return "", fmt.Errorf("fencegate binaries from %s: %w", BinaryEnv, err)
			}
		}
		return bin, nil
	}
	root, err := cluster.ModuleRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack", "build-fencegate.sh"), dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build fencegate: %w\n%s", err, out)
	}
	return filepath.Join(dir, "fencegate"), nil
}

// AuthorityBinary is the fencegate-authority binary that Build puts beside
// the fencegate binary bin.
func AuthorityBinary(bin string) string {
	return filepath.Join(filepath.Dir(bin), "fencegate-authority")
}

// Start starts the authority and the clusters and waits until every
// fencegate is ready. On error it returns what it started, for Stop.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Say == nil {
		opts.Say = func(string, ...any) {}
	}
	s := &Stack{Binary: opts.Binary, Dir: opts.Dir, opts: opts}
	// The config has a directory of its own: fencegate watches the
	// directory, and the logs written beside it would wake that watch.
	if err := os.MkdirAll(filepath.Join(s.Dir, "config"), 0o700); err != nil {
		return s, fmt.Errorf("fencegate config directory: %w", err)
	}
	config := configFile
	if len(opts.ExemptGroups) > 0 {
		exempt, err := json.Marshal(opts.ExemptGroups)
		if err != nil {
			return s, fmt.Errorf("fencegate config: %w", err)
		}
		config += "exempt_groups: " + string(exempt) + "\n"
	}
	for i, k := range opts.FencedKinds {
		if i == 0 {
			config += "fenced_kinds:\n"
		}
		config += fmt.Sprintf("  - {group: %q, kind: %q}\n", k.Group, k.Kind)
	}
	if err := os.WriteFile(s.configPath(), []byte(config), 0o600); err != nil {
		return s, fmt.Errorf("write fencegate config: %w", err)
	}
	var err error
	if opts.MTLS && opts.Authority == "" {
		if s.PKI, err = newPKI(filepath.Join(s.Dir, "pki"), opts.Clusters); err != nil {
			return s, err
		}
	}
	if opts.Authority != "" {
		s.AuthorityAddr = opts.Authority
	} else {
		if s.AuthorityAddr, err = proc.FreeAddress(); err != nil {
			return s, err
		}
		if s.authorityHealth, err = proc.FreeAddress(); err != nil {
			return s, err
		}
		if err := s.StartAuthority(ctx); err != nil {
			return s, err
		}
	}
	creds := insecure.NewCredentials()
	if s.PKI != nil {
		cfg, err := s.PKI.TLS(s.PKI.Operator)
		if err != nil {
			return s, err
		}
		creds = credentials.NewTLS(cfg)
	}
	s.conn, err = grpc.NewClient(s.AuthorityAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return s, fmt.Errorf("connect to the authority: %w", err)
	}
	s.Fence = fencev1.NewFenceServiceClient(s.conn)

	for _, spec := range opts.Clusters {
		if err := s.startCluster(ctx, spec); err != nil {
			return s, err
		}
	}
	if s.Kubeconfig, err = s.mergeKubeconfigs(); err != nil {
		return s, err
	}
	return s, nil
}

// AddCluster starts one more cluster beside the running ones: a control
// plane and its fencegate processes. With MTLS its processes declare with
// the certificate of the cluster's Name, which Start made for the clusters
// of Options.Clusters (a copy of one of them restored from a backup has the
// same). Kubeconfig gains the cluster's context.
func (s *Stack) AddCluster(ctx context.Context, spec ClusterSpec) (*Cluster, error) {
	if err := s.startCluster(ctx, spec); err != nil {
		return nil, err
	}
	var err error
	if s.Kubeconfig, err = s.mergeKubeconfigs(); err != nil {
		return nil, err
	}
	return s.Clusters[len(s.Clusters)-1], nil
}

// startCluster starts a cluster's control plane, from a snapshot when the
// spec names one, and its fencegate processes.
func (s *Stack) startCluster(ctx context.Context, spec ClusterSpec) error {
	label := spec.label()
	s.opts.Say("starting control plane %q (kube-apiserver + etcd)", label)
	var fenced []schema.GroupResource
	for _, k := range s.opts.FencedKinds {
		fenced = append(fenced, schema.GroupResource{Group: k.Group, Resource: k.Resource})
	}
	webhooks := cluster.ComponentWebhooks(fenced...)
	// No CRDs means fencegate's own alone (config/crd).
	var crds []string
	if len(s.opts.CRDs) > 0 {
		root, err := cluster.ModuleRoot()
		if err != nil {
			return err
		}
		crds = append([]string{filepath.Join(root, "config", "crd")}, s.opts.CRDs...)
	}
	cp, err := cluster.Start(cluster.Options{Name: label, CRDs: crds, Webhooks: webhooks, RestoreFrom: spec.RestoreFrom, AuditLog: s.opts.AuditLog})
	if err != nil {
		return err
	}
	c := &Cluster{Name: spec.Name, Label: label, Epoch: spec.Epoch, ControlPlane: cp, webhooks: webhooks}
	s.Clusters = append(s.Clusters, c)
	if c.Kubeconfig, _, err = cp.AddUser(ControllerUser, "system:masters"); err != nil {
		return err
	}
	// A restored control plane has the namespace already.
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s in %s: %w", Namespace, label, err)
	}
	for range max(spec.Replicas, 1) {
		if err := s.StartReplica(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// mergeKubeconfigs writes one kubeconfig with every cluster's admin
// context.
func (s *Stack) mergeKubeconfigs() (string, error) {
	merged := clientcmdapi.NewConfig()
	for _, c := range s.Clusters {
		cfg, err := clientcmd.LoadFromFile(c.ControlPlane.Kubeconfig)
		if err != nil {
			return "", fmt.Errorf("kubeconfig of %s: %w", c.Label, err)
		}
		maps.Copy(merged.Clusters, cfg.Clusters)
		maps.Copy(merged.AuthInfos, cfg.AuthInfos)
		maps.Copy(merged.Contexts, cfg.Contexts)
		if merged.CurrentContext == "" {
			merged.CurrentContext = cfg.CurrentContext
		}
	}
	path := filepath.Join(s.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*merged, path); err != nil {
		return "", fmt.Errorf("write the kubeconfig of every cluster: %w", err)
	}
	return path, nil
}

// FenceFlags are the flags with which a `fencegate fence` command reaches
// the authority as the operator.
func (s *Stack) FenceFlags() []string {
	flags := []string{"--authority", s.AuthorityAddr}
	if s.PKI != nil {
		flags = append(flags, s.PKI.Flags(s.PKI.Operator)...)
	}
	return flags
}

// configPath is the file of data.fencegate.config every fencegate reads.
func (s *Stack) configPath() string { return filepath.Join(s.Dir, "config", "config.yaml") }

// Failover runs `fencegate failover` with the stack's kubeconfig and
// args; exit is its exit code, err set only when it could not run.
func (s *Stack) Failover(ctx context.Context, args ...string) (stdout, stderr string, exit int, err error) {
	cmd := exec.CommandContext(ctx, s.Binary, append([]string{"failover", "--kubeconfig", s.Kubeconfig}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) {
		return out.String(), errOut.String(), exitErr.ExitCode(), nil
	}
	return out.String(), errOut.String(), 0, err
}

// AuthorityMetricsAddress is the address of the authority's /metrics,
// /healthz and /readyz.
func (s *Stack) AuthorityMetricsAddress() string { return s.authorityHealth }

// Cluster returns the cluster the stack knows by label (its name, unless
// it is a copy with a label of its own); it panics on a label the stack
// does not have, which is a bug in the caller.
func (s *Stack) Cluster(label string) *Cluster {
	for _, c := range s.Clusters {
		if c.Label == label {
			return c
		}
	}
	panic("stack has no cluster " + label)
}

// StartAuthority starts the authority on its address and data directory,
// the same ones after a stop or a crash, and waits until it is ready.
func (s *Stack) StartAuthority(ctx context.Context) error {
	data := filepath.Join(s.Dir, "authority-data")
	s.opts.Say("starting the fence authority on %s (embedded etcd in %s)", s.AuthorityAddr, data)
	args := []string{
		"--listen", s.AuthorityAddr,
		"--data-dir", data,
		"--metrics-address", s.authorityHealth,
		"--log-format", "console"}
	if s.PKI != nil {
		args = append(args, "--tls-cert", s.PKI.Server.CertFile, "--tls-key", s.PKI.Server.KeyFile,
			"--client-ca", s.PKI.CAFile, "--authorization-file", s.PKI.AuthorizationFile)
	}
	if s.opts.LeaseTTL > 0 {
		args = append(args, "--lease-ttl", s.opts.LeaseTTL.String())
	}
	args = append(args, s.opts.AuthorityFlags...)
	var err error
	if s.Authority, err = proc.Start(AuthorityBinary(s.Binary), s.Dir, "authority", args...); err != nil {
		return err
	}
	return s.Authority.WaitHealthy(ctx, http.DefaultClient, "http://"+s.authorityHealth+"/readyz")
}

// StartReplica starts one more `fencegate run` process for a cluster, at
// the cluster's epoch, and waits until it is ready. The first one serves
// the webhook the API server calls.
func (s *Stack) StartReplica(ctx context.Context, c *Cluster) error {
	r := &Replica{}
	var err error
	if r.Metrics, err = proc.FreeAddress(); err != nil {
		return err
	}
	if r.Health, err = proc.FreeAddress(); err != nil {
		return err
	}
	r.Webhook = net.JoinHostPort(c.webhooks.LocalServingHost, strconv.Itoa(c.webhooks.LocalServingPort))
	if len(c.Replicas) > 0 {
		if r.Webhook, err = proc.FreeAddress(); err != nil {
			return err
		}
	}
	authority := s.AuthorityAddr
	if s.opts.AuthorityProxies {
		if r.AuthorityProxy, err = tcpproxy.Start(s.AuthorityAddr); err != nil {
			return fmt.Errorf("proxy to the authority for %s: %w", c.Label, err)
		}
		authority = r.AuthorityProxy.Addr()
	}
	s.opts.Say("starting fencegate run for %q at epoch %d (webhook on %s)", c.Label, c.Epoch, r.Webhook)
	args := []string{"run",
		"--cluster-name", c.Name,
		"--epoch", strconv.FormatUint(c.Epoch, 10),
		"--authority", authority,
		"--kubeconfig", c.Kubeconfig,
		"--namespace", Namespace,
		"--leader-elect",
		"--config-file", s.configPath(),
		"--webhook-address", r.Webhook,
		"--webhook-cert-dir", c.webhooks.LocalServingCertDir,
		"--webhook-certs", "external",
		"--metrics-address", r.Metrics,
		"--health-address", r.Health,
		"--log-format", cmp.Or(s.opts.LogFormat, "console")}
	switch {
	case s.opts.Authority != "":
		// An authority off loopback: plaintext must be asked for.
		args = append(args, "--authority-insecure")
	case s.PKI != nil:
		args = append(args, s.PKI.Flags(s.PKI.Cluster(c.Name))...)
	}
	if s.opts.InstanceLease > 0 {
		args = append(args, "--instance-lease-duration", s.opts.InstanceLease.String())
	}
	if len(s.opts.Domains) > 0 {
		args = append(args, "--domains", strings.Join(s.opts.Domains, ","))
	}
	if len(s.opts.HoldKinds) > 0 {
		args = append(args, "--hold-kinds", strings.Join(s.opts.HoldKinds, ","))
	}
	if s.opts.HoldQuietFor > 0 {
		args = append(args, "--hold-quiet-for", s.opts.HoldQuietFor.String())
	}
	if s.opts.Profiling {
		if r.Pprof, err = proc.FreeAddress(); err != nil {
			return err
		}
		args = append(args, "--pprof-address", r.Pprof)
	}
	name := fmt.Sprintf("%s-epoch%d", c.Label, c.Epoch)
	if c.started > 0 {
		name = fmt.Sprintf("%s-%d-epoch%d", c.Label, c.started, c.Epoch)
	}
	c.started++
	if r.Run, err = proc.Start(s.Binary, s.Dir, name, args...); err != nil {
		if r.AuthorityProxy != nil {
			r.AuthorityProxy.Close()
		}
		return err
	}
	c.Replicas = append(c.Replicas, r)
	if len(c.Replicas) == 1 {
		c.Run, c.Health, c.Metrics, c.WebhookAddr, c.WebhookCA = r.Run, r.Health, r.Metrics, r.Webhook, c.webhooks.LocalServingCAData
	}
	return r.Run.WaitHealthy(ctx, http.DefaultClient, "http://"+r.Health+"/readyz")
}

// RolloutEpoch restarts a cluster's fencegate processes one by one with a
// new epoch, as a rollout of the Deployment with a new flag value does.
func (s *Stack) RolloutEpoch(ctx context.Context, c *Cluster, epoch uint64) error {
	old := c.Replicas
	c.Replicas, c.Epoch = nil, epoch
	for _, r := range old {
		if err := r.Run.Stop(30 * time.Second); err != nil {
			return err
		}
		if r.AuthorityProxy != nil {
			r.AuthorityProxy.Close()
		}
		if err := s.StartReplica(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops every process and control plane.
func (s *Stack) Stop() error {
	var errs []error
	for _, c := range s.Clusters {
		for _, r := range c.Replicas {
			errs = append(errs, r.Run.Stop(30*time.Second))
			if r.AuthorityProxy != nil {
				r.AuthorityProxy.Close()
			}
		}
		errs = append(errs, c.ControlPlane.Stop())
	}
	if s.conn != nil {
		errs = append(errs, s.conn.Close())
	}
	if s.Authority != nil {
		errs = append(errs, s.Authority.Stop(30*time.Second))
	}
	return errors.Join(errs...)
}
