package cachepeek_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/internal/cachepeek"
	"github.com/fencegate/fencegate/test/cluster"
)

// TestPeekReadsTheCachedObject: on a real API server, a Peeker reads what
// the cache holds (through the cache until its informer has synced, then
// from the informer's store, the cache's own object), and says so when it
// holds nothing.
func TestPeekReadsTheCachedObject(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cp := cluster.StartForTest(t, cluster.Options{Name: "peek"})
	if err := cp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"team": "a"}}}); err != nil {
		t.Fatal(err)
	}
	c, err := cache.New(cp.Config, cache.Options{Scheme: cp.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	// Until it has started, the cache refuses reads (ErrCacheNotStarted);
	// no informer is registered yet, so this waits for the start alone.
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache never started")
	}
	p := cachepeek.New(c, c, &corev1.Namespace{})
	tests := map[string]struct {
		key       string
		wantFound bool
		wantTeam  string
	}{
		"a cached namespace":  {key: "shop", wantFound: true, wantTeam: "a"},
		"an absent namespace": {key: "nowhere"},
	}
	// The first reads may go through the cache before its informer has
	// synced; the later ones read its store.
	for range 3 {
		for name, tc := range tests {
			t.Run(name, func(t *testing.T) {
				obj, found, err := p.Get(ctx, client.ObjectKey{Name: tc.key})
				if err != nil || found != tc.wantFound {
					t.Fatalf("Get(%s) = found %v, %v; want found %v", tc.key, found, err, tc.wantFound)
				}
				if found && obj.GetLabels()["team"] != tc.wantTeam {
					t.Errorf("Get(%s) labels %v, want team %s", tc.key, obj.GetLabels(), tc.wantTeam)
				}
			})
		}
	}
	// A change reaches the store.
	var ns corev1.Namespace
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: "shop"}, &ns); err != nil {
		t.Fatal(err)
	}
	ns.Labels["team"] = "b"
	if err := cp.Client.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		obj, found, err := p.Get(ctx, client.ObjectKey{Name: "shop"})
		return err == nil && found && obj.GetLabels()["team"] == "b", nil
	}); err != nil {
		t.Fatal("the relabelled namespace never reached the Peeker")
	}
}
