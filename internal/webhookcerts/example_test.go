package webhookcerts_test

import (
	"fmt"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/fencegate/fencegate/internal/webhookcerts"
)

// A webhook process: certificates first, then the webhook server, which
// reads tls.crt and tls.key from CertDir and reloads them when they change.
func ExampleAdd() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err)
	}
	ready, err := webhookcerts.Add(mgr, webhookcerts.Options{
		Namespace:         "fencegate-system",
		SecretName:        "fencegate-webhook-tls",
		ServiceName:       "fencegate-webhook",
		CertDir:           "/run/fencegate/webhook-certs",
		ValidatingWebhook: "fencegate",
		MutatingWebhook:   "fencegate",
	})
	if err != nil {
		panic(err)
	}
	if err := mgr.AddReadyzCheck("webhook-certificates", webhookcerts.ReadyCheck(ready)); err != nil {
		panic(err)
	}
	go func() {
		<-ready
		fmt.Println("start the webhook server on /run/fencegate/webhook-certs")
	}()
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		panic(err)
	}
}
