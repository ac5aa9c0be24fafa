package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	fencev1 "github.com/fencegate/fencegate/api/fence/v1"
	"github.com/fencegate/fencegate/domain"
	"github.com/fencegate/fencegate/test/stack"
)

// paymentsDomain is the walkthrough's second fence domain, and shop the
// namespace whose label puts its Components in it.
const (
	paymentsDomain = "payments"
	shopNamespace  = "shop"
)

// checkoutYAML is a Component of the payments domain, by its namespace's
// label; %s is the chart version.
const checkoutYAML = `apiVersion: components.fencegate.dev/v1alpha1
kind: Component
metadata:
  name: checkout
  namespace: shop
spec:
  enabled: true
  chart:
    repository: https://charts.example.com
    name: checkout
    version: %s
`

// activeActive shows two domains with opposite holders on the same two
// clusters, then one of them failing over while the other's holder keeps
// writing: the other domain has no admission gap.
func (w *walkthrough) activeActive(ctx context.Context) error {
	east, west := w.s.Cluster("east"), w.s.Cluster("west")

	w.title("active/active: namespace %s's label puts its Components in domain %s; fail that domain over to west alone", shopNamespace, paymentsDomain)
	for _, c := range []*stack.Cluster{east, west} {
		for _, args := range [][]string{{"create", "namespace", shopNamespace}, {"label", "namespace", shopNamespace, domain.Label + "=" + paymentsDomain}} {
			if stderr, exit, err := w.kubectl(ctx, c, nil, args...); err != nil || exit != 0 {
				return errors.Join(err, fmt.Errorf("kubectl %s on %s (exit %d): %s", strings.Join(args, " "), c.Name, exit, stderr))
			}
		}
	}
	before, err := w.token(ctx, "default")
	if err != nil {
		return err
	}
	out, exit, err := w.fencegate(ctx, "failover", "--kubeconfig", "kubeconfig", "--domain", paymentsDomain, "--to", "west", "--from", "east", "--wait")
	if err != nil {
		return err
	}
	if exit != 0 || !strings.Contains(out, "failover complete in") {
		return fmt.Errorf("fencegate failover --domain %s exited %d", paymentsDomain, exit)
	}
	if err := w.getFencesOf(ctx, map[*stack.Cluster]map[string]string{
		east: {"default": "active", paymentsDomain: "fenced"},
		west: {"default": "fenced", paymentsDomain: "active"},
	}); err != nil {
		return err
	}
	if after, err := w.token(ctx, "default"); err != nil || after != before {
		return errors.Join(err, fmt.Errorf("the default domain's token went from %d to %d when %s failed over", before, after, paymentsDomain))
	}
	w.proves("east holds default, west holds %s: one Fence per domain on each cluster, and the default domain's fence did not move (token %d)", paymentsDomain, before)

	w.title("each cluster admits only its own domains' Components")
	if stderr, exit, err := w.kubectl(ctx, west, fmt.Appendf(nil, checkoutYAML, "1.0.0"), "apply", "-f", "-"); err != nil || exit != 0 {
		return errors.Join(err, fmt.Errorf("west should admit shop/checkout, of the domain it holds (exit %d): %s", exit, stderr))
	}
	denial, exit, err := w.kubectl(ctx, east, fmt.Appendf(nil, checkoutYAML, "1.0.0"), "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		return err
	}
	if exit == 0 || !strings.Contains(denial, `"west"`) {
		return fmt.Errorf("east should deny shop/checkout naming west as the holder of %s; kubectl exit %d: %s", paymentsDomain, exit, denial)
	}
	denial, exit, err = w.kubectl(ctx, west, fmt.Appendf(nil, componentYAML, "1.2.0"), "apply", "--dry-run=server", "-f", "-")
	if err != nil {
		return err
	}
	if exit == 0 || !strings.Contains(denial, `"east"`) {
		return fmt.Errorf("west should deny default/billing naming east as the holder of default; kubectl exit %d: %s", exit, denial)
	}
	w.proves("west admits shop/checkout (%s) and refuses default/billing; east the other way round", paymentsDomain)

	w.title("fail %s back to east while east keeps writing default/billing", paymentsDomain)
	writes := startWrites(ctx, east.ControlPlane.Client, types.NamespacedName{Namespace: "default", Name: "billing"})
	writes.wait(ctx, 5)
	out, exit, err = w.fencegate(ctx, "failover", "--kubeconfig", "kubeconfig", "--domain", paymentsDomain, "--to", "east", "--from", "west", "--wait")
	if err != nil {
		writes.stop()
		return err
	}
	writes.wait(ctx, writes.count()+5)
	admitted, refused := writes.stop()
	fmt.Fprintf(w.out, "    default/billing on east: %d writes during the failover of %s, %d refused\n", admitted+len(refused), paymentsDomain, len(refused))
	if exit != 0 || !strings.Contains(out, "failover complete in") {
		return fmt.Errorf("fencegate failover --domain %s back to east exited %d", paymentsDomain, exit)
	}
	if len(refused) > 0 {
		return fmt.Errorf("%d writes of the default domain on east were refused while %s failed over; the first: %s", len(refused), paymentsDomain, refused[0])
	}
	if after, err := w.token(ctx, "default"); err != nil || after != before {
		return errors.Join(err, fmt.Errorf("the default domain's token went from %d to %d when %s failed back", before, after, paymentsDomain))
	}
	if err := w.getFencesOf(ctx, map[*stack.Cluster]map[string]string{
		east: {"default": "active", paymentsDomain: "active"},
		west: {"default": "fenced", paymentsDomain: "fenced"},
	}); err != nil {
		return err
	}
	w.proves("east holds both domains again; the default domain's %d writes went on through the other domain's failover, none refused, its token still %d", admitted, before)
	return nil
}

// token returns the authority's fencing token of a domain.
func (w *walkthrough) token(ctx context.Context, d string) (uint64, error) {
	resp, err := w.s.Fence.GetFence(ctx, &fencev1.GetFenceRequest{Domain: d})
	if err != nil {
		return 0, fmt.Errorf("get the fence of %s: %w", d, err)
	}
	return resp.GetFence().GetHolder().GetToken(), nil
}

// writes changes one Component in a loop, counting what the API server
// admitted and what it refused.
type writes struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	admitted int
	refused  []string
}

// startWrites begins changing an annotation of the object, as fast as the
// API server answers.
func startWrites(ctx context.Context, c client.Client, key types.NamespacedName) *writes {
	ctx, cancel := context.WithCancel(ctx)
	w := &writes{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ctx.Err() == nil; i++ {
			patch := fmt.Appendf(nil, `{"metadata":{"annotations":{"demo.fencegate.dev/write":"%d"}}}`, i)
			obj := componentRef(key)
			err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, patch))
			if ctx.Err() != nil {
				return
			}
			w.mu.Lock()
			if err != nil {
				w.refused = append(w.refused, err.Error())
			} else {
				w.admitted++
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *writes) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.admitted + len(w.refused)
}

// wait waits until n writes were answered, or ctx ends.
func (w *writes) wait(ctx context.Context, n int) {
	for w.count() < n && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the loop and returns what it counted.
func (w *writes) stop() (admitted int, refused []string) {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.admitted, w.refused
}
