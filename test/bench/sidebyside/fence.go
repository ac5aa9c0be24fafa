package sidebyside

import (
	"context"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/fencegate/fencegate/api/fence/rpctypes"
	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/fenceagent"
	"github.com/fencegate/fencegate/fencestate"
)

// fenceStates returns data.fence as the agents of the holder and of the
// fenced cluster write it, from the authority's record of the fence, for
// OPA's data files and for the oracle. valid_until_ns is 0 (no bound):
// nothing renews a file, and the shipped policies do not read it (fencegate's
// engine turns an expired active state into unknown before they see it).
func fenceStates(ctx context.Context, fence fencev1.FenceServiceClient, holderName, fencedName string) (active, fenced fencestate.State, err error) {
	resp, err := fence.GetFence(ctx, &fencev1.GetFenceRequest{Domain: fenceagent.DefaultDomain})
	if err != nil {
		return active, fenced, fmt.Errorf("get the fence from the authority: %w", err)
	}
	f := resp.GetFence()
	h := f.GetHolder()
	if h.GetClusterName() != holderName {
		return active, fenced, fmt.Errorf("the fence is held by %q, want %q", h.GetClusterName(), holderName)
	}
	holder := fencestate.Cluster{Name: h.GetClusterName(), UID: h.GetClusterUid(), Epoch: h.GetEpoch()}
	var self *fencev1.ClusterRecord
	for _, c := range f.GetClusters() {
		if c.GetClusterName() == fencedName {
			self = c
		}
	}
	if self == nil {
		return active, fenced, fmt.Errorf("cluster %q never declared to the authority", fencedName)
	}
	now := time.Now().UnixNano()
	active = fencestate.State{
		Status: fencestate.Active, Domain: f.GetDomain(), Cluster: holder, Holder: holder,
		Token: h.GetToken(), LastSuccessNS: now,
	}
	fencedCluster := fencestate.Cluster{Name: self.GetClusterName(), UID: self.GetClusterUid(), Epoch: self.GetLastEpoch()}
	fenced = fencestate.State{
		Status: fencestate.Fenced, Domain: f.GetDomain(), Cluster: fencedCluster, Holder: holder,
		LastSuccessNS: now, Reason: rpctypes.ReasonClusterFenced,
		Message: fmt.Sprintf("cluster %s is fenced: %s holds the fence; raise its epoch above %d to make it active", fencedCluster.Name, holder.Name, holder.Epoch),
	}
	return active, fenced, nil
}

// clusterConfig reads data.fencegate.config from the file a cluster's
// fencegate process was given (its --config-file), which OPA is given too.
func clusterConfig(pid int) (path string, config map[string]any, err error) {
	if path, err = processFlag(pid, "--config-file"); err != nil {
		return "", nil, fmt.Errorf("fencegate's config file: %w", err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("read fencegate's config file: %w", err)
	}
	if err := yaml.Unmarshal(raw, &config); err != nil {
		return "", nil, fmt.Errorf("decode fencegate's config file %s: %w", path, err)
	}
	return path, config, nil
}
