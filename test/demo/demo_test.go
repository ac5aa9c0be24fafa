package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/stack"
)

// TestWalkthrough runs `make run`'s walkthrough in its non-interactive mode.
// Each step checks its own outcome; this test also checks that every step
// ran and reported what it proved.
func TestWalkthrough(t *testing.T) {
	cluster.RequireControlPlane(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	bin, err := stack.Build(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}

	var out bytes.Buffer
	if err := run(ctx, bin, true, &out); err != nil {
		t.Fatalf("walkthrough: %v\n%s", err, out.String())
	}
	for _, want := range []string{
		"Step 1 · east declares epoch 1 to the authority, over mTLS as spiffe://fencegate.demo/cluster/east",
		"✓ the authority granted the fence to east",
		"STATE    EPOCH   HOLDER   TOKEN   COMPONENTS   HELD",
		"kustomization.kustomize.toolkit.fluxcd.io/apps created",
		"$ kubectl --context west get cronjobs,kustomizations -n default -o custom-columns=KIND:.kind,NAME:.metadata.name,SUSPEND:.spec.suspend",
		"✓ west does not hold the fence, so its fencegate suspended the CronJob and the Kustomization",
		"No Flux controller runs in this demo",
		"2/2 quiet Quiesced",
		"payments   active   1       east",
		"✓ kubectl shows the fence on each cluster",
		"✓ the mutating webhook stamped fencegate.dev/epoch=1",
		`denied the request: fencegate: cluster "west" (epoch 1) does not hold the ownership fence`,
		"✓ a dry run gets exactly the real decision",
		`PermissionDenied: identity "spiffe://fencegate.demo/cluster/west" may act only as cluster west; this call declares east`,
		`fencegate_authority_permission_denied_total{method="DeclareClusterEpoch"} 1`,
		"call refused",
		`"identity": "spiffe://fencegate.demo/cluster/west"`,
		"✓ an identity acts only as the cluster it is bound to",
		"✓ the history holds the real changes",
		"$ fencegate failover --kubeconfig kubeconfig --to west --from east --wait",
		"old holder stopped admitting",
		"old holder quiesced",
		"east: 2 held objects, all quiet",
		"failover complete in",
		"✓ west holds the fence at epoch 2",
		"no process restarted",
		"✓ west is Holding and Enforced; east is fenced (ClusterFenced) and Enforced",
		"east's CronJob and Kustomization are held",
		"✓ the new standby suspended its actuators before the failover command returned",
		"✓ east stopped admitting before west was granted",
		"✓ only the cluster holding the fence can change Components, and its controller marks them FenceHeld",
		"✓ east holds the fence again at epoch 3",
		"✓ the operator's view agrees: east holds the fence at epoch 3",
		"$ fencegate failover --kubeconfig kubeconfig --domain payments --to west --from east --wait",
		"✓ east holds default, west holds payments",
		`does not hold the ownership fence of domain "payments": cluster "west" holds it at epoch 2. Components can only change on the cluster that holds the fence. To fail over to east, run fencegate failover --domain payments --to east`,
		"✓ west admits shop/checkout (payments) and refuses default/billing; east the other way round",
		"during the failover of payments, 0 refused",
		"✓ east holds both domains again",
		"Every step behaved as fencegate promises.",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("walkthrough output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("walkthrough output:\n%s", out.String())
	}
}
