package webhookcerts

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Defaults of Options.
const (
	// DefaultCAValidity is long enough that a CA rotation is rare, short
	// enough that the rotation path runs in the life of a cluster.
	DefaultCAValidity = 2 * 365 * 24 * time.Hour
	// DefaultCertValidity makes the serving certificate roll every two
	// months, so the reload path is exercised long before anything expires.
	DefaultCertValidity = 90 * 24 * time.Hour
)

// Options configure the certificate manager.
type Options struct {
	// Namespace holds the Secret and the Service.
	Namespace string
	// SecretName is the Secret that stores the CA, the trust bundle and the
	// serving certificate. It is created if missing; a Secret created
	// empty by a Helm chart is filled.
	SecretName string
	// ServiceName is the webhook's Service; the serving certificate covers
	// <service>, <service>.<namespace>, <service>.<namespace>.svc and
	// <service>.<namespace>.svc.cluster.local. Empty when the webhook
	// configurations call a URL instead (then Hosts must name it).
	ServiceName string
	// Hosts are further DNS names or IP addresses for the serving
	// certificate, for webhook configurations that use a URL
	// ("127.0.0.1", "webhook.example.com").
	Hosts []string
	// CertDir receives tls.crt and tls.key; it must be writable (an
	// emptyDir in a pod). The webhook server reloads them on change.
	CertDir string
	// ValidatingWebhook and MutatingWebhook name the webhook configurations
	// whose every webhook gets the CA bundle; empty skips one.
	ValidatingWebhook, MutatingWebhook string
	// CAValidity and CertValidity are the lifetimes of a new CA and a new
	// serving certificate; each is renewed after two thirds of it. Zero
	// means DefaultCAValidity and DefaultCertValidity.
	CAValidity, CertValidity time.Duration
	// Clock tells the time; nil means the real clock.
	Clock clock.Clock
	// Log receives one line per certificate issued, bundle injected or
	// error; the zero Logger means the manager's logger.
	Log logr.Logger
	// Registerer, if set, registers the fencegate_webhook_certificate_*
	// metrics.
	Registerer prometheus.Registerer
}

// Add registers the certificate manager with mgr; it runs on every replica
// (without leader election) from mgr.Start. The returned channel is closed
// once tls.crt and tls.key are in CertDir and both webhook configurations
// exist and trust them: start serving the webhook after it closes, and keep
// /readyz failing until then (ReadyCheck).
func Add(mgr manager.Manager, opts Options) (<-chan struct{}, error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	if opts.Log.GetSink() == nil {
		opts.Log = mgr.GetLogger().WithName("webhookcerts")
	}
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register core types: %w", err)
	}
	if err := admissionregistrationv1.AddToScheme(scheme); err != nil {
		return nil, fmt.Errorf("register admissionregistration types: %w", err)
	}

	// A cache of its own, narrowed by name to the three objects: the RBAC
	// rules grant list and watch on those names only, and the manager's
	// cache (whatever else the binary watches) is left alone.
	byName := func(name string) fields.Selector { return fields.OneTermEqualSelector("metadata.name", name) }
	byObject := map[client.Object]cache.ByObject{
		&corev1.Secret{}: {
			Namespaces: map[string]cache.Config{opts.Namespace: {}},
			Field:      byName(opts.SecretName),
		},
	}
	if opts.ValidatingWebhook != "" {
		byObject[&admissionregistrationv1.ValidatingWebhookConfiguration{}] = cache.ByObject{Field: byName(opts.ValidatingWebhook)}
	}
	if opts.MutatingWebhook != "" {
		byObject[&admissionregistrationv1.MutatingWebhookConfiguration{}] = cache.ByObject{Field: byName(opts.MutatingWebhook)}
	}
	objects, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     scheme,
		Mapper:     mgr.GetRESTMapper(),
		ByObject:   byObject,
	})
	if err != nil {
		return nil, fmt.Errorf("webhook certificates cache: %w", err)
	}
	writer, err := client.New(mgr.GetConfig(), client.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     scheme,
		Mapper:     mgr.GetRESTMapper(),
	})
	if err != nil {
		return nil, fmt.Errorf("webhook certificates client: %w", err)
	}
	m := newMetrics()
	if opts.Registerer != nil {
		if err := m.register(opts.Registerer); err != nil {
			return nil, err
		}
	}
	r := newRotator(opts, objects, writer, m)
	if err := mgr.Add(r); err != nil {
		return nil, fmt.Errorf("add webhook certificate manager: %w", err)
	}
	return r.ready, nil
}

// ReadyCheck is a readiness check that fails until ready is closed, for
// manager.AddReadyzCheck: a pod must not receive webhook traffic before it
// serves a certificate the API server trusts.
func ReadyCheck(ready <-chan struct{}) healthz.Checker {
	return func(*http.Request) error {
		select {
		case <-ready:
			return nil
		default:
			return errors.New("webhook serving certificate not in place yet")
		}
	}
}

// complete checks the options and fills in defaults.
func (o *Options) complete() error {
	var errs []error
	if o.Namespace == "" {
		errs = append(errs, errors.New("webhook certificates: namespace is required"))
	}
	if msgs := validation.IsDNS1123Subdomain(o.SecretName); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("webhook certificates: secret name %q: %v", o.SecretName, msgs))
	}
	if o.CertDir == "" {
		errs = append(errs, errors.New("webhook certificates: certificate directory is required"))
	}
	if o.ServiceName == "" && len(o.Hosts) == 0 {
		errs = append(errs, errors.New("webhook certificates: a service name or at least one host is required to name the serving certificate"))
	}
	if o.ServiceName != "" {
		if msgs := validation.IsDNS1035Label(o.ServiceName); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("webhook certificates: service name %q: %v", o.ServiceName, msgs))
		}
	}
	for _, h := range o.Hosts {
		if net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) > 0 {
			errs = append(errs, fmt.Errorf("webhook certificates: host %q is neither an IP address nor a DNS name", h))
		}
	}
	if o.CAValidity < 0 || o.CertValidity < 0 {
		errs = append(errs, errors.New("webhook certificates: validity must not be negative"))
	}
	if o.CAValidity == 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity == 0 {
		o.CertValidity = DefaultCertValidity
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return errors.Join(errs...)
}

// hosts lists the names the serving certificate covers, the Service's
// fully qualified name first (the name the API server dials).
func (o *Options) hosts() []string {
	var hosts []string
	if o.ServiceName != "" {
		svc := o.ServiceName + "." + o.Namespace
		hosts = append(hosts, svc+".svc", o.ServiceName, svc, svc+".svc.cluster.local")
	}
	return append(hosts, o.Hosts...)
}
