package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	"helm.sh/helm/v4/pkg/action"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fencegate/fencegate/gate"
)

// helmClients makes Helm's action configurations. Helm builds a client of
// its own, which the gate cannot wrap: each configuration is made for one
// reconcile, from gate.RESTConfig, so that Helm's writes (the chart's
// objects, the release's Secrets) run under that reconcile's hold and stop
// with it. Discovery is read-only and shared.
type helmClients struct {
	config    *rest.Config
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
}

func newHelmClients(config *rest.Config) (*helmClients, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("discovery client: %w", err)
	}
	cached := memory.NewMemCacheClient(dc)
	return &helmClients{config: config, discovery: cached, mapper: restmapper.NewDeferredDiscoveryRESTMapper(cached)}, nil
}

// forReconcile is Helm's configuration for a reconcile of a Component in
// namespace: its writes obey the hold of ctx.
func (h *helmClients) forReconcile(ctx context.Context, namespace string) (*action.Configuration, error) {
	cfg := action.NewConfiguration(action.ConfigurationSetLogger(logr.ToSlogHandler(logr.FromContextOrDiscard(ctx).V(1))))
	getter := &restGetter{config: gate.RESTConfig(ctx, h.config), clients: h, namespace: namespace}
	if err := cfg.Init(getter, namespace, "secret"); err != nil {
		return nil, fmt.Errorf("helm configuration for namespace %s: %w", namespace, err)
	}
	return cfg, nil
}

// restGetter hands Helm the gated config and the shared discovery.
type restGetter struct {
	config    *rest.Config
	clients   *helmClients
	namespace string
}

func (g *restGetter) ToRESTConfig() (*rest.Config, error) { return g.config, nil }

func (g *restGetter) ToDiscoveryClient() (discovery.CachedDiscoveryInterface, error) {
	return g.clients.discovery, nil
}

func (g *restGetter) ToRESTMapper() (meta.RESTMapper, error) { return g.clients.mapper, nil }

// ToRawKubeConfigLoader gives Helm the Component's namespace as its
// default; no kubeconfig file is read.
func (g *restGetter) ToRawKubeConfigLoader() clientcmd.ClientConfig {
	return clientcmd.NewDefaultClientConfig(*clientcmdapi.NewConfig(), &clientcmd.ConfigOverrides{Context: clientcmdapi.Context{Namespace: g.namespace}})
}
