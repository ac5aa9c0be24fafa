package webhookcerts

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// maxCheckInterval bounds the wait between two checks when nothing happens,
// so that a jump of the wall clock (a suspended VM, a corrected clock) is
// noticed within hours, not at the next computed renewal.
const maxCheckInterval = 6 * time.Hour

// rotator keeps the Secret, the webhook configurations and the files in
// CertDir in step. One loop does everything: it runs on a change of any of
// the three objects, when a certificate is due, and after an error (with
// backoff).
type rotator struct {
	opts    Options
	issuer  issuer
	objects cache.Cache
	writer  client.Writer
	clock   clock.Clock
	log     logr.Logger
	metrics *metrics

	kick      chan struct{}
	ready     chan struct{}
	readyOnce sync.Once
	// waiting remembers what readiness last waited for, to log it once.
	waiting string
}

func newRotator(opts Options, objects cache.Cache, writer client.Writer, m *metrics) *rotator {
	hosts := opts.hosts()
	return &rotator{
		opts: opts,
		issuer: issuer{
			caName:       "fencegate webhook CA for " + hosts[0],
			hosts:        hosts,
			caValidity:   opts.CAValidity,
			certValidity: opts.CertValidity,
		},
		objects: objects,
		writer:  writer,
		clock:   opts.Clock,
		log:     opts.Log,
		metrics: m,
		kick:    make(chan struct{}, 1),
		ready:   make(chan struct{}),
	}
}

// NeedLeaderElection is false: every replica needs the files in its own
// CertDir, and concurrent writers are serialised by the API server's
// optimistic concurrency (the loser re-reads and finds the work done).
func (r *rotator) NeedLeaderElection() bool { return false }

// Start runs the loop until ctx ends.
func (r *rotator) Start(ctx context.Context) error {
	watched := []client.Object{&corev1.Secret{}}
	if r.opts.ValidatingWebhook != "" {
		watched = append(watched, &admissionregistrationv1.ValidatingWebhookConfiguration{})
	}
	if r.opts.MutatingWebhook != "" {
		watched = append(watched, &admissionregistrationv1.MutatingWebhookConfiguration{})
	}
	onChange := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.poke() },
		UpdateFunc: func(any, any) { r.poke() },
		DeleteFunc: func(any) { r.poke() },
	}
	for _, obj := range watched {
		informer, err := r.objects.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
		if _, err := informer.AddEventHandler(onChange); err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	cacheDone := make(chan error, 1)
	go func() { cacheDone <- r.objects.Start(ctx) }()
	if !r.objects.WaitForCacheSync(ctx) {
		if err := <-cacheDone; err != nil {
			return fmt.Errorf("webhook certificates cache: %w", err)
		}
		return nil // ctx ended
	}

	retry := &backoff.ExponentialBackOff{
		InitialInterval:     200 * time.Millisecond,
		RandomizationFactor: 0.5,
		Multiplier:          2,
		MaxInterval:         time.Minute,
	}
	retry.Reset()
	var lastErr string
	for {
		next, err := r.sync(ctx)
		// Measured after the pass, so time spent in it (or a clock that
		// jumped meanwhile) is not slept on top.
		delay := next.Sub(r.clock.Now())
		switch {
		case ctx.Err() != nil:
			return <-cacheDone
		case apierrors.IsConflict(err):
			// Another writer, or this one's own write not yet in the
			// cache: the next pass starts from the newer object.
			delay = retry.NextBackOff()
			r.log.V(1).Info("webhook certificate write conflicted", "error", err.Error(), "effect", "retrying")
		case err != nil:
			r.metrics.syncErrors.Inc()
			delay = retry.NextBackOff()
			// Logged when the error changes, not on every retry.
			if err.Error() != lastErr {
				r.log.Error(err, "webhook certificates not in place", "effect", "retrying with backoff")
				lastErr = err.Error()
			}
		default:
			retry.Reset()
			if lastErr != "" {
				r.log.Info("webhook certificates in place again")
				lastErr = ""
			}
			if delay <= 0 {
				continue // a certificate fell due during the pass
			}
		}
		timer := r.clock.NewTimer(min(delay, maxCheckInterval))
		select {
		case <-ctx.Done():
			timer.Stop()
			return <-cacheDone
		case <-r.kick:
		case <-timer.C():
		}
		timer.Stop()
	}
}

// poke asks the loop for one more pass; pokes coalesce and never block.
func (r *rotator) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// webhookConfig is a validating or mutating webhook configuration, reduced
// to the CA bundles of its webhooks.
type webhookConfig struct {
	obj     client.Object
	bundles []*[]byte
}

// sync makes one pass: decide, write the Secret, inject the bundle, write
// the files. It returns when the next pass is due if nothing changes.
func (r *rotator) sync(ctx context.Context) (time.Time, error) {
	secret := &corev1.Secret{}
	err := r.objects.Get(ctx, client.ObjectKey{Namespace: r.opts.Namespace, Name: r.opts.SecretName}, secret)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return time.Time{}, fmt.Errorf("read Secret %s/%s: %w", r.opts.Namespace, r.opts.SecretName, err)
	}
	configs, missing, err := r.webhookConfigs(ctx)
	if err != nil {
		return time.Time{}, err
	}
	trusted := func(ca *x509.Certificate) bool {
		for _, c := range configs {
			for _, b := range c.bundles {
				if !bundleHas(*b, ca) {
					return false
				}
			}
		}
		return true
	}

	now := r.clock.Now()
	p, err := r.issuer.decide(secret.Data, now, trusted)
	if err != nil {
		return time.Time{}, fmt.Errorf("issue webhook certificates: %w", err)
	}
	if p.data != nil {
		if err := r.writeSecret(ctx, secret, exists, p.data); err != nil {
			return time.Time{}, err
		}
		if p.issuedCA {
			r.metrics.issued.WithLabelValues("ca").Inc()
			r.log.Info("issued a new webhook CA", "secret", r.opts.SecretName, "notAfter", p.ca.NotAfter,
				"olderCAsStillTrusted", len(p.roots)-1)
		}
		if p.issuedServing {
			r.metrics.issued.WithLabelValues("serving").Inc()
			r.log.Info("issued a new webhook serving certificate", "secret", r.opts.SecretName, "notAfter", p.serving.NotAfter)
		}
	}
	if err := r.inject(ctx, configs, p.bundle); err != nil {
		return time.Time{}, err
	}
	if err := r.writeFiles(secret.Data); err != nil {
		return time.Time{}, err
	}
	r.metrics.expiry.WithLabelValues("ca").Set(float64(p.ca.NotAfter.Unix()))
	r.metrics.expiry.WithLabelValues("serving").Set(float64(p.serving.NotAfter.Unix()))

	if len(missing) > 0 {
		if w := fmt.Sprint(missing); w != r.waiting {
			r.log.Info("webhook certificates in place, webhook configurations missing",
				"missing", missing, "effect", "not ready until the webhook configurations exist")
			r.waiting = w
		}
	} else {
		r.readyOnce.Do(func() { close(r.ready) })
	}
	return p.next, nil
}

// webhookConfigs reads the configured webhook configurations that exist, and
// names those that do not.
func (r *rotator) webhookConfigs(ctx context.Context) ([]webhookConfig, []string, error) {
	var configs []webhookConfig
	var missing []string
	get := func(name, kind string, obj client.Object) error {
		if name == "" {
			return nil
		}
		if err := r.objects.Get(ctx, client.ObjectKey{Name: name}, obj); err != nil {
			if apierrors.IsNotFound(err) {
				missing = append(missing, kind+"/"+name)
				return nil
			}
			return fmt.Errorf("read %s %s: %w", kind, name, err)
		}
		c := webhookConfig{obj: obj}
		switch o := obj.(type) {
		case *admissionregistrationv1.ValidatingWebhookConfiguration:
			for i := range o.Webhooks {
				c.bundles = append(c.bundles, &o.Webhooks[i].ClientConfig.CABundle)
			}
		case *admissionregistrationv1.MutatingWebhookConfiguration:
			for i := range o.Webhooks {
				c.bundles = append(c.bundles, &o.Webhooks[i].ClientConfig.CABundle)
			}
		}
		configs = append(configs, c)
		return nil
	}
	if err := get(r.opts.ValidatingWebhook, "ValidatingWebhookConfiguration", &admissionregistrationv1.ValidatingWebhookConfiguration{}); err != nil {
		return nil, nil, err
	}
	if err := get(r.opts.MutatingWebhook, "MutatingWebhookConfiguration", &admissionregistrationv1.MutatingWebhookConfiguration{}); err != nil {
		return nil, nil, err
	}
	return configs, missing, nil
}

// writeSecret stores data in the Secret, creating it if needed. On success
// secret holds what the API server stored. Conflicts (another replica wrote
// first) come back as errors and the next pass starts from its result.
func (r *rotator) writeSecret(ctx context.Context, secret *corev1.Secret, exists bool, data map[string][]byte) error {
	if !exists {
		secret.ObjectMeta = metav1.ObjectMeta{Namespace: r.opts.Namespace, Name: r.opts.SecretName}
		secret.Type = corev1.SecretTypeOpaque
		secret.Data = data
		if err := r.writer.Create(ctx, secret); err != nil {
			return fmt.Errorf("create Secret %s/%s (or create it empty beforehand if this service account may not create Secrets): %w",
				r.opts.Namespace, r.opts.SecretName, err)
		}
		return nil
	}
	if secret.Data == nil {
		secret.Data = map[string][]byte{}
	}
	maps.Copy(secret.Data, data) // keys of others are kept
	if err := r.writer.Update(ctx, secret); err != nil {
		return fmt.Errorf("update Secret %s/%s: %w", r.opts.Namespace, r.opts.SecretName, err)
	}
	return nil
}

// inject sets the bundle on every webhook of every configuration that does
// not already carry it exactly; a bundle restored from a backup or reset by
// a re-applied manifest is repaired the same way.
func (r *rotator) inject(ctx context.Context, configs []webhookConfig, bundle []byte) error {
	for _, c := range configs {
		stale := false
		for _, b := range c.bundles {
			if !bytes.Equal(*b, bundle) {
				*b = bundle
				stale = true
			}
		}
		if !stale {
			continue
		}
		if err := r.writer.Update(ctx, c.obj); err != nil {
			return fmt.Errorf("inject CA bundle into %T %s: %w", c.obj, c.obj.GetName(), err)
		}
		r.log.Info("injected the CA bundle", "kind", fmt.Sprintf("%T", c.obj), "name", c.obj.GetName(), "webhooks", len(c.bundles))
	}
	return nil
}

// writeFiles puts the serving certificate and key into CertDir when they
// differ from what is there. Each file is replaced by a rename, so a reader
// never sees half a file; the key goes first, so the last change a watcher
// sees completes a matching pair.
func (r *rotator) writeFiles(data map[string][]byte) error {
	if err := os.MkdirAll(r.opts.CertDir, 0o700); err != nil {
		return fmt.Errorf("create certificate directory: %w", err)
	}
	for _, f := range []struct {
		name string
		mode os.FileMode
	}{{keyKey, 0o600}, {certKey, 0o644}} {
		path := filepath.Join(r.opts.CertDir, f.name)
		if have, err := os.ReadFile(path); err == nil && bytes.Equal(have, data[f.name]) {
			continue
		}
		if err := writeFileAtomic(path, data[f.name], f.mode); err != nil {
			return err
		}
	}
	return nil
}

func writeFileAtomic(path string, data []byte, mode os.FileMode) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := errors.Join(tmp.Chmod(mode), tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
