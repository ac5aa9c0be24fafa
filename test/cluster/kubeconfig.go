package cluster

import (
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
)

// renameContext names the kubeconfig's cluster, user and context after the
// control plane, so that a person juggling "east" and "west" sees which one
// kubectl talks to.
func renameContext(kubeconfig []byte, name string) ([]byte, error) {
	cfg, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse kubeconfig: %w", err)
	}
	for ctxName, kctx := range cfg.Contexts {
		delete(cfg.Contexts, ctxName)
		if c, ok := cfg.Clusters[kctx.Cluster]; ok {
			delete(cfg.Clusters, kctx.Cluster)
			cfg.Clusters[name] = c
			kctx.Cluster = name
		}
		if u, ok := cfg.AuthInfos[kctx.AuthInfo]; ok {
			delete(cfg.AuthInfos, kctx.AuthInfo)
			cfg.AuthInfos[name+"-admin"] = u
			kctx.AuthInfo = name + "-admin"
		}
		cfg.Contexts[name] = kctx
	}
	cfg.CurrentContext = name
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	return out, nil
}
