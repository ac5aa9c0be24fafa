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
// validating (/validate) and mutating (/mutate) webhooks the way the Helm
// chart writes them: an entry for Components (validation of Components and
// their status, so that only the controller writes status on a fenced
// cluster; mutation of Components) and, with fenced resources (the
// chart's admission.kinds), an entry for their main resources that skips
// fencegate's namespace and kube-system; sideEffects None, failurePolicy
// Fail, admission.k8s.io/v1. Hand them to Options.Webhooks; Start fills in
// LocalServingHost, LocalServingPort and LocalServingCertDir (tls.crt,
// tls.key), where fencegate's webhook server must listen, and points the
// API server at them over TLS.
func ComponentWebhooks(fenced ...schema.GroupResource) *envtest.WebhookInstallOptions {
	operations := []admissionregistrationv1.OperationType{
		admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
	}
	components := func(resources ...string) []admissionregistrationv1.RuleWithOperations {
		return []admissionregistrationv1.RuleWithOperations{{
			Operations: operations,
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{"components.fencegate.dev"},
				APIVersions: []string{"*"},
				Resources:   resources,
				Scope:       ptr.To(admissionregistrationv1.NamespacedScope),
			},
		}}
	}
	// A fenced resource's main resource only: its actuator keeps writing
	// its status, which tells whether it has gone quiet.
	var kinds []admissionregistrationv1.RuleWithOperations
	for _, gr := range fenced {
		kinds = append(kinds, admissionregistrationv1.RuleWithOperations{
			Operations: operations,
			Rule: admissionregistrationv1.Rule{
				APIGroups: []string{gr.Group}, APIVersions: []string{"*"}, Resources: []string{gr.Resource},
				Scope: ptr.To(admissionregistrationv1.AllScopes),
			},
		})
	}
	notFencegates := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: "kubernetes.io/metadata.name", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"fencegate-system", "kube-system"},
	}}}
	clientConfig := func(path string) admissionregistrationv1.WebhookClientConfig {
		// envtest rewrites the service reference into a URL on the local
		// serving host and port.
		return admissionregistrationv1.WebhookClientConfig{
			Service: &admissionregistrationv1.ServiceReference{Name: "fencegate", Namespace: "fencegate-system", Path: ptr.To(path)},
		}
	}
	validate := []admissionregistrationv1.ValidatingWebhook{
		ValidatingWebhook("validate.components.fencegate.dev", clientConfig("/validate"), components("components", "components/status"), nil),
	}
	mutate := []admissionregistrationv1.MutatingWebhook{
		MutatingWebhook("mutate.components.fencegate.dev", clientConfig("/mutate"), components("components"), nil),
	}
	if len(kinds) > 0 {
		validate = append(validate, ValidatingWebhook("validate.kinds.fencegate.dev", clientConfig("/validate"), kinds, notFencegates))
		mutate = append(mutate, MutatingWebhook("mutate.kinds.fencegate.dev", clientConfig("/mutate"), kinds, notFencegates))
	}
	return &envtest.WebhookInstallOptions{
		ValidatingWebhooks: []*admissionregistrationv1.ValidatingWebhookConfiguration{{
			ObjectMeta: metav1.ObjectMeta{Name: ValidatingWebhookName},
			Webhooks:   validate,
		}},
		MutatingWebhooks: []*admissionregistrationv1.MutatingWebhookConfiguration{{
			ObjectMeta: metav1.ObjectMeta{Name: MutatingWebhookName},
			Webhooks:   mutate,
		}},
	}
}

// ValidatingWebhook is a validating webhook entry as the chart writes
// fencegate's: failurePolicy Fail, matchPolicy Equivalent, sideEffects
// None, a 5 s timeout, admission.k8s.io/v1.
func ValidatingWebhook(name string, cc admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations, namespaces *metav1.LabelSelector) admissionregistrationv1.ValidatingWebhook {
	return admissionregistrationv1.ValidatingWebhook{
		Name:                    name,
		ClientConfig:            cc,
		Rules:                   rules,
		NamespaceSelector:       namespaces,
		FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
		MatchPolicy:             ptr.To(admissionregistrationv1.Equivalent),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNone),
		TimeoutSeconds:          ptr.To[int32](5),
		AdmissionReviewVersions: []string{"v1"},
	}
}

// MutatingWebhook is a mutating webhook entry as the chart writes
// fencegate's: as ValidatingWebhook, and never reinvoked.
func MutatingWebhook(name string, cc admissionregistrationv1.WebhookClientConfig, rules []admissionregistrationv1.RuleWithOperations, namespaces *metav1.LabelSelector) admissionregistrationv1.MutatingWebhook {
	v := ValidatingWebhook(name, cc, rules, namespaces)
	return admissionregistrationv1.MutatingWebhook{
		Name:                    v.Name,
		ClientConfig:            v.ClientConfig,
		Rules:                   v.Rules,
		NamespaceSelector:       v.NamespaceSelector,
		FailurePolicy:           v.FailurePolicy,
		MatchPolicy:             v.MatchPolicy,
		SideEffects:             v.SideEffects,
		TimeoutSeconds:          v.TimeoutSeconds,
		AdmissionReviewVersions: v.AdmissionReviewVersions,
		ReinvocationPolicy:      ptr.To(admissionregistrationv1.NeverReinvocationPolicy),
	}
}
