package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/internal/testcerts"
	"github.com/fencegate/fencegate/test/cluster"
)

// bareWebhooksName names the bare webhooks' configurations, and prefixes
// their webhooks' names.
const bareWebhooksName = "bare.latency.fencegate.dev"

// maxReview bounds the body the bare webhooks read, as the API server
// bounds what it sends.
const maxReview = 3 << 20

// startBareWebhooks serves the least an admission webhook can answer, and
// makes the API server call it for every Component write in namespace, as
// it calls fencegate's: a mutating call, then a validating one, over TLS
// from the same Go HTTP stack. The server reads each AdmissionReview's uid
// and allows, with no decision, no patch and no log line. So what a write
// in namespace costs over the floor is what two webhook calls cost through
// the API server, whatever a webhook decides: fencegate's floor as a
// webhook.
// It returns the count of reviews the server answered.
func startBareWebhooks(tb testing.TB, ctx context.Context, cl client.Client, namespace string) (*atomic.Int64, error) {
	tb.Helper()
	ca, pair, err := testcerts.Loopback("bare-webhooks")
	if err != nil {
		return nil, err
	}
	cert, err := pair.TLS()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("bare webhooks: %w", err)
	}
	answered := &atomic.Int64{}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if allowReview(w, r) {
				answered.Add(1)
			}
		}),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	tb.Cleanup(func() { _ = srv.Close() })

	url := "https://" + ln.Addr().String()
	rules := func(resources ...string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{
				admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
			},
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{"components.fencegate.dev"}, APIVersions: []string{"*"}, Resources: resources,
				Scope: ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}}
	}
	only := &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: namespace}}
	clientConfig := func(path string) admissionregistrationv1.WebhookClientConfig {
		return admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url + path), CABundle: ca.CertPEM}
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: bareWebhooksName},
		Webhooks: []admissionregistrationv1.MutatingWebhook{
			cluster.MutatingWebhook("mutate."+bareWebhooksName, clientConfig("/mutate"), rules("components"), only),
		},
	}
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: bareWebhooksName},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			cluster.ValidatingWebhook("validate."+bareWebhooksName, clientConfig("/validate"), rules("components", "components/status"), only),
		},
	}
	if err := cl.Create(ctx, mutating); err != nil {
		return nil, fmt.Errorf("create the bare mutating webhook: %w", err)
	}
	if err := cl.Create(ctx, validating); err != nil {
		return nil, fmt.Errorf("create the bare validating webhook: %w", err)
	}
	return answered, nil
}

// allowReview answers an AdmissionReview with allowed, under its uid, and
// reports whether it did.
func allowReview(w http.ResponseWriter, r *http.Request) bool {
	var review struct {
		Request *struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxReview))
	if err == nil {
		err = json.Unmarshal(body, &review)
	}
	if err == nil && review.Request == nil {
		err = errors.New("no request")
	}
	if err != nil {
		http.Error(w, "not an AdmissionReview: "+err.Error(), http.StatusBadRequest)
		return false
	}
	uid, err := json.Marshal(review.Request.UID)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return false
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(w, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":%s,"allowed":true}}`, uid)
	return true
}
