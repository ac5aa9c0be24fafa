package cluster

import (
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Names of the webhook configurations that ComponentWebhooks installs.
const (
	ValidatingWebhookName = "fencegate-validating"
	MutatingWebhookName   = "fencegate-mutating"
)

// ComponentWebhooks returns webhook install options for fencegate's
// validating (/validate) and mutating (/mutate) webhooks, scoped to
// Components, and to the fenced resources (the chart's admission.kinds),
// the way the Helm chart scopes them: validation of Components and
// their status (so that only the controller writes status on a fenced
// cluster), mutation of Components, sideEffects None, failurePolicy Fail,
// admission.k8s.io/v1. Hand them to Options.Webhooks;
// Start fills in LocalServingHost, LocalServingPort and LocalServingCertDir
// (tls.crt, tls.key), where fencegate's webhook server must listen, and
// points the API server at them over TLS.
func ComponentWebhooks(fenced ...schema.GroupResource) *envtest.WebhookInstallOptions {
	operations := []admissionregistrationv1.OperationType{
		admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
	}
	rules := func(resources ...string) []admissionregistrationv1.RuleWithOperations {
		rs := []admissionregistrationv1.RuleWithOperations{{
			Operations: operations,
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{"components.fencegate.dev"},
				APIVersions: []string{"*"},
				Resources:   resources,
				Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}}
		// A fenced resource's main resource only: its actuator keeps
		// writing its status, which tells whether it has gone quiet.
		for _, gr := range fenced {
			rs = append(rs, admissionregistrationv1.RuleWithOperations{
				Operations: operations,
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{gr.Group}, APIVersions: []string{"*"}, Resources: []string{gr.Resource},
					Scope: ptr.To(admissionregistrationv1.AllScopes),
				},
			})
		}
		return rs
	}
	clientConfig := func(path string) admissionregistrationv1.WebhookClientConfig {
		// envtest rewrites the service reference into a URL on the local
		// serving host and port.
		return admissionregistrationv1.WebhookClientConfig{
			Service: &admissionregistrationv1.ServiceReference{Name: "fencegate", Namespace: "fencegate-system", Path: ptr.To(path)},
		}
	}
	sideEffects := admissionregistrationv1.SideEffectClassNone
	return &envtest.WebhookInstallOptions{
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{{
			ObjectMeta: metav1.ObjectMeta{Name: ValidatingWebhookName},
			Webhooks: []admissionregistrationv1.ValidatingWebhook{{
				Name:                    "validate.components.fencegate.dev",
				ClientConfig:            clientConfig("/validate"),
				Rules:                   rules("components", "components/status"),
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
				SideEffects:             &sideEffects,
				TimeoutSeconds:          ptr.To[int32](5),
				AdmissionReviewVersions: []string{"v1"},
			}},
		}},
		MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{{
			ObjectMeta: metav1.ObjectMeta{Name: MutatingWebhookName},
			Webhooks: []admissionregistrationv1.MutatingWebhook{{
				Name:                    "mutate.components.fencegate.dev",
				ClientConfig:            clientConfig("/mutate"),
				Rules:                   rules("components"),
				FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
				MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
				SideEffects:             &sideEffects,
				TimeoutSeconds:          ptr.To[int32](5),
				AdmissionReviewVersions: []string{"v1"},
				ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
			}},
		}},
	}
}
