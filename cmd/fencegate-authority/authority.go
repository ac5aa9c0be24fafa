package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/fencegate/fencegate/authority"
	"github.com/fencegate/fencegate/authority/authz"
	"github.com/fencegate/fencegate/authority/etcdbackend"
	"github.com/fencegate/fencegate/authority/statemachine"
	"github.com/fencegate/fencegate/internal/cli"
	"github.com/fencegate/fencegate/internal/tlsutil"
)

const (
	// etcdStartTimeout bounds starting the embedded etcd or reaching the
	// external one.
	etcdStartTimeout = 60 * time.Second
	// readyTimeout bounds the etcd check behind /readyz.
	readyTimeout = 2 * time.Second
	// httpShutdownTimeout bounds the metrics server's shutdown.
	httpShutdownTimeout = 5 * time.Second
)

// authorityOptions are the flags of fencegate-authority.
type authorityOptions struct {
	listen         string
	dataDir        string
	etcdEndpoints  []string
	etcdTLS        tlsutil.ClientFiles
	etcdPrefix     string
	leaseTTL       time.Duration
	tls            tlsutil.ServerFiles
	insecure       bool
	metricsAddress string
	pprofAddress   string

	authorizationFile       string
	authorization           string
	maxEpochStep            uint64
	clusterGenerationPeriod time.Duration
	historyLimit            int

	// logMetrics counts the log lines that sampling did not write.
	logMetrics prometheus.Collector
}

// authorizationNone is the --authorization value that lets every caller
// make every call.
const authorizationNone = "none"

// newAuthorityCommand returns the command that runs the authority: the
// root command of fencegate-authority.
func newAuthorityCommand(logs *cli.LogOptions) *cobra.Command {
	o := &authorityOptions{}
	cmd := &cobra.Command{
		Use:   "fencegate-authority",
		Short: "Run the reference fence authority: the gRPC FenceService, its state in etcd",
		Long: `Run the reference fence authority: the gRPC FenceService that hands the
ownership fence of each domain to the cluster that declares the highest epoch.

It keeps the fence in an embedded single-node etcd under --data-dir, or in an
external etcd cluster given by --etcd-endpoints (production: the fence then
survives the loss of a machine, and several authorities over one etcd serve
as replicas). It serves plaintext only on a loopback address unless
--insecure is given; use --tls-cert/--tls-key for TLS and --client-ca to
require client certificates (mTLS). Metrics, /healthz and /readyz are served
on --metrics-address. SIGTERM stops it gracefully.

With --client-ca, --authorization-file binds the identities of client
certificates to roles: a cluster declares and releases only as itself, an
operator reads, revokes and forgets, a reader reads. The file is reloaded when
it changes; one that does not parse leaves the last good one in force. An
authority that callers reach from other machines does not start without an
authorization file unless --authorization=none says that every caller may
do everything.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.validate(cmd); err != nil {
				return err
			}
			log, err := logs.Logger(cmd)
			if err != nil {
				return err
			}
			o.logMetrics = logs.Metrics()
			return o.run(cmd.Context(), log)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.listen, "listen", cli.DefaultAuthorityAddress, "address (host:port) to serve the gRPC FenceService on")
	fs.StringVar(&o.dataDir, "data-dir", "./fencegate-authority-data", "directory of the embedded etcd that stores the fence (unused with --etcd-endpoints)")
	fs.StringSliceVar(&o.etcdEndpoints, "etcd-endpoints", nil, "client URLs of an external etcd cluster to store the fence in, instead of the embedded etcd (comma-separated)")
	fs.StringVar(&o.etcdTLS.CAFile, "etcd-ca", "", "file of the CAs that the external etcd's certificates must chain to")
	fs.StringVar(&o.etcdTLS.CertFile, "etcd-cert", "", "client certificate file for the external etcd")
	fs.StringVar(&o.etcdTLS.KeyFile, "etcd-key", "", "key file of --etcd-cert")
	fs.StringVar(&o.etcdPrefix, "etcd-prefix", "/fencegate/", "prefix of every etcd key the authority writes; authorities sharing an etcd and a prefix are replicas of one authority")
	fs.DurationVar(&o.leaseTTL, "lease-ttl", authority.DefaultLeaseTTL, "how long a granted or renewed fence lasts without renewal; a partitioned holder is replaced only after it")
	fs.StringVar(&o.tls.CertFile, "tls-cert", "", "serving certificate file (PEM); reloaded when it changes")
	fs.StringVar(&o.tls.KeyFile, "tls-key", "", "key file of --tls-cert")
	fs.StringVar(&o.tls.ClientCAFile, "client-ca", "", "file of the CAs that client certificates must chain to; clients without one are refused (mTLS)")
	fs.BoolVar(&o.insecure, "insecure", false, "allow plaintext gRPC on a non-loopback --listen address")
	fs.StringVar(&o.metricsAddress, "metrics-address", "127.0.0.1:7444", "address (host:port) of the HTTP server of /metrics, /healthz and /readyz; empty turns it off")
	fs.StringVar(&o.pprofAddress, "pprof-address", "", "address (host:port) of Go's /debug/pprof/ profiles, for finding where CPU and memory go (default: off; serve it on loopback only)")
	fs.StringVar(&o.authorizationFile, "authorization-file", "", "YAML file that binds client identities to roles (clusters, operators, readers); needs --client-ca; reloaded when it changes")
	fs.StringVar(&o.authorization, "authorization", "", `"none" lets every caller make every call, for an authority without --authorization-file that others reach`)
	fs.Uint64Var(&o.maxEpochStep, "max-epoch-step", statemachine.DefaultMaxEpochStep, "refuse a declaration whose epoch is more than this above the highest epoch of its domain")
	fs.IntVar(&o.historyLimit, "history-limit", authority.DefaultHistoryLimit, fmt.Sprintf("history entries kept per domain; the oldest is dropped when a new one is recorded (at least %d, the most one change writes)", statemachine.MaxHistoryPerChange))
	fs.DurationVar(&o.clusterGenerationPeriod, "cluster-generation-period", statemachine.DefaultGenerationPeriod, "how often a declaring cluster's generation moves on; a copy of a cluster restored from a backup older than about two periods is told CLUSTER_RESTORED")
	return cmd
}

func (o *authorityOptions) validate(cmd *cobra.Command) error {
	var errs []error
	if o.leaseTTL < time.Second {
		errs = append(errs, fmt.Errorf("--lease-ttl %s: want at least 1s (agents renew every few seconds)", o.leaseTTL))
	}
	if _, _, err := net.SplitHostPort(o.listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen %q: want host:port: %w", o.listen, err))
	} else if !o.tls.Enabled() && !o.insecure && !cli.IsLoopback(o.listen) {
		errs = append(errs, fmt.Errorf("--listen %s is not a loopback address: serve TLS with --tls-cert and --tls-key, or pass --insecure to serve plaintext anyway", o.listen))
	}
	switch {
	case o.tls.Enabled() && (o.tls.CertFile == "" || o.tls.KeyFile == ""):
		errs = append(errs, errors.New("--tls-cert and --tls-key go together"))
	case o.tls.ClientCAFile != "" && !o.tls.Enabled():
		errs = append(errs, errors.New("--client-ca needs TLS: give --tls-cert and --tls-key too"))
	}
	if len(o.etcdEndpoints) > 0 && cmd.Flags().Changed("data-dir") {
		errs = append(errs, errors.New("--data-dir is for the embedded etcd and --etcd-endpoints for an external one: give one of them"))
	}
	if len(o.etcdEndpoints) == 0 && o.etcdTLS.Enabled() {
		errs = append(errs, errors.New("--etcd-ca, --etcd-cert and --etcd-key need --etcd-endpoints"))
	}
	for flag, address := range map[string]string{"metrics-address": o.metricsAddress, "pprof-address": o.pprofAddress} {
		if address == "" {
			continue
		}
		if _, _, err := net.SplitHostPort(address); err != nil {
			errs = append(errs, fmt.Errorf("--%s %q: want host:port: %w", flag, address, err))
		}
	}
	errs = append(errs, o.validateAuthorization()...)
	if o.maxEpochStep == 0 {
		errs = append(errs, errors.New("--max-epoch-step 0: want at least 1 (a failover raises an epoch by one)"))
	}
	if o.historyLimit < statemachine.MaxHistoryPerChange {
		errs = append(errs, fmt.Errorf("--history-limit %d: want at least %d, the most entries one change of a fence writes (a takeover after each of %d instances' leases ended)",
			o.historyLimit, statemachine.MaxHistoryPerChange, statemachine.MaxInstances))
	}
	if o.clusterGenerationPeriod < time.Second {
		errs = append(errs, fmt.Errorf("--cluster-generation-period %s: want at least 1s (clusters declare every few seconds, and learn a new generation from their next answer)", o.clusterGenerationPeriod))
	}
	return errors.Join(errs...)
}

// validateAuthorization checks that the authority knows who may call it:
// an authorization file needs client certificates to read identities from,
// and an authority that others reach needs a file, or --authorization=none
// to say on purpose that it has none.
func (o *authorityOptions) validateAuthorization() []error {
	switch {
	case o.authorization != "" && o.authorization != authorizationNone:
		return []error{fmt.Errorf("--authorization %q: the one value is %q (every caller may make every call); roles come from --authorization-file", o.authorization, authorizationNone)}
	case o.authorizationFile != "" && o.authorization == authorizationNone:
		return []error{errors.New("--authorization=none and --authorization-file contradict each other: give one of them")}
	case o.authorizationFile != "" && o.tls.ClientCAFile == "":
		return []error{errors.New("--authorization-file needs --client-ca: identities are read from verified client certificates")}
	case o.authorizationFile != "" || o.authorization == authorizationNone:
		return nil
	case o.tls.ClientCAFile != "":
		return []error{errors.New("--client-ca without --authorization-file: give the file that binds client identities to roles, or --authorization=none to let every client that the CA signed make every call")}
	case !cli.IsLoopback(o.listen):
		return []error{fmt.Errorf("--listen %s is reachable from other machines but no --authorization-file says who may call: give one (with --client-ca), or --authorization=none to let every caller make every call", o.listen)}
	}
	return nil
}

func (o *authorityOptions) run(ctx context.Context, log logr.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), o.logMetrics)
	// /readyz answers from the service once it exists; /healthz as soon as
	// the process serves HTTP, so an orchestrator can tell a slow etcd start
	// from a dead process.
	monitor := &authorityMonitor{}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	group, ctx := errgroup.WithContext(ctx)
	// fail stops what already runs before returning a start-up error.
	fail := func(err error) error {
		stop()
		_ = group.Wait()
		return err
	}
	if o.metricsAddress != "" {
		lis, err := net.Listen("tcp", o.metricsAddress)
		if err != nil {
			return fmt.Errorf("--metrics-address: %w", err)
		}
		srv := &http.Server{Handler: monitor.handler(reg), ReadHeaderTimeout: 5 * time.Second}
		group.Go(func() error { return serveHTTP(ctx, srv, lis) })
		log.Info("serving metrics and health checks", "address", "http://"+lis.Addr().String())
	}
	if o.pprofAddress != "" {
		lis, err := net.Listen("tcp", o.pprofAddress)
		if err != nil {
			return fmt.Errorf("--pprof-address: %w", err)
		}
		srv := &http.Server{Handler: profiles(), ReadHeaderTimeout: 5 * time.Second}
		group.Go(func() error { return serveHTTP(ctx, srv, lis) })
		log.Info("serving Go profiles", "address", "http://"+lis.Addr().String()+"/debug/pprof/")
	}

	etcd, describeStore, closeStore, err := o.openStore(ctx, log)
	if err != nil {
		return fail(err)
	}
	defer closeStore()
	svc, err := authority.New(etcd, authority.Options{
		LeaseTTL:     o.leaseTTL,
		MaxEpochStep: o.maxEpochStep,
		HistoryLimit: o.historyLimit,
		KeyPrefix:    o.etcdPrefix,

		ClusterGenerationPeriod: o.clusterGenerationPeriod,
		Logger:                  log.WithName("authority"),
		Registerer:              reg,
	})
	if err != nil {
		return fail(err)
	}
	guardOpts := authz.GuardOptions{Logger: log.WithName("authorization"), Registerer: reg}
	if o.authorizationFile != "" {
		source, err := authz.NewSource(o.authorizationFile, authz.SourceOptions{Logger: log.WithName("authorization"), Registerer: reg})
		if err != nil {
			return fail(fmt.Errorf("--authorization-file: %w", err))
		}
		group.Go(func() error { return source.Start(ctx) })
		guardOpts.Policy = source.Policy
		monitor.authorization.Store(source)
	} else {
		log.Info("authorization is off: every caller may declare as any cluster, and release or revoke any lease",
			"warning", "unsafe beyond a single machine", "fix", "give --authorization-file with --client-ca")
	}
	guard, err := authz.NewGuard(guardOpts)
	if err != nil {
		return fail(err)
	}

	// The RPC metrics' interceptors come first, so they count every call.
	rpcMetrics, err := authority.NewRPCMetrics(reg)
	if err != nil {
		return fail(err)
	}
	grpcOpts := rpcMetrics.ServerOptions()
	if o.tls.Enabled() {
		cfg, watcher, err := tlsutil.Server(o.tls)
		if err != nil {
			return fail(fmt.Errorf("--tls-cert/--tls-key: %w", err))
		}
		group.Go(func() error { return tlsutil.RunWatcher(ctx, watcher) })
		// Connections close when their client certificate expires, so
		// that clients present their rotated one.
		grpcOpts = append(grpcOpts, grpc.Creds(guard.Credentials(credentials.NewTLS(cfg))))
	}
	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fail(fmt.Errorf("--listen: %w", err))
	}
	// Ready only once calls can connect.
	monitor.service.Store(svc)
	transport := "plaintext"
	switch {
	case o.tls.ClientCAFile != "":
		transport = "mTLS"
	case o.tls.Enabled():
		transport = "TLS"
	}
	log.Info("fence authority serving", append([]any{"address", lis.Addr().String(), "transport", transport, "leaseTTL", o.leaseTTL.String()}, describeStore...)...)
	srv := authority.NewServer(svc, guard, grpcOpts...)
	group.Go(func() error { return srv.Serve(ctx, lis) })
	err = group.Wait()
	log.Info("fence authority stopped")
	return err
}

// openStore starts the embedded etcd or connects to the external one, and
// returns its client, log values that say where the fence is kept, and a
// function that closes it.
func (o *authorityOptions) openStore(ctx context.Context, log logr.Logger) (*clientv3.Client, []any, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, etcdStartTimeout)
	defer cancel()
	if len(o.etcdEndpoints) > 0 {
		client, err := etcdbackend.Dial(ctx, etcdbackend.ExternalOptions{Endpoints: o.etcdEndpoints, TLS: o.etcdTLS, Logger: log})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("--etcd-endpoints: %w", err)
		}
		return client, []any{"store", "external etcd", "endpoints", strings.Join(o.etcdEndpoints, ","), "prefix", o.etcdPrefix},
			func() { _ = client.Close() }, nil
	}
	e, err := etcdbackend.StartEmbedded(ctx, etcdbackend.EmbeddedOptions{Dir: o.dataDir, Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("--data-dir: %w", err)
	}
	return e.Client(), []any{"store", "embedded etcd", "dataDir", e.Dir()}, e.Close, nil
}

// authorityMonitor is what the monitoring endpoints report on, filled in as
// the authority starts.
// profiles serves Go's profiles under /debug/pprof/.
func profiles() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

type authorityMonitor struct {
	service       atomic.Pointer[authority.Service]
	authorization atomic.Pointer[authz.Source]
}

// handler serves /metrics, /healthz (the process runs) and /readyz (the
// authority can serve: etcd answers a quorum read). /readyz also says which
// authorization file is in force, and when its last reload failed: the
// authority still serves then, from the last good file.
func (m *authorityMonitor) handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		svc := m.service.Load()
		if svc == nil {
			http.Error(w, "starting: the fence store is not open yet", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := svc.Check(ctx); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
		if src := m.authorization.Load(); src != nil {
			_, _ = fmt.Fprintln(w, authorizationStatus(src.Status()))
		}
	})
	return mux
}

// authorizationStatus is /readyz's line on the authorization file.
func authorizationStatus(st authz.Status) string {
	line := fmt.Sprintf("authorization: %s revision %s, loaded at %s", st.Path, st.Revision, st.LoadedAt.UTC().Format(time.RFC3339))
	if st.Error != "" {
		line += fmt.Sprintf("; the reload at %s failed, so that revision stays in force: %s", st.FailedAt.UTC().Format(time.RFC3339), st.Error)
	}
	return line
}

// serveHTTP serves until ctx ends, then shuts down.
func serveHTTP(ctx context.Context, srv *http.Server, lis net.Listener) error {
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return fmt.Errorf("serve metrics on %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	_ = srv.Shutdown(shutdownCtx)
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve metrics on %s: %w", lis.Addr(), err)
	}
	return nil
}
