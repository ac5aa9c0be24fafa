package actuators

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fencegate/fencegate/engine/enginetest"
	"github.com/fencegate/fencegate/hold"
	"github.com/fencegate/fencegate/test/cluster"
	"github.com/fencegate/fencegate/test/pinned"
	"github.com/fencegate/fencegate/test/proc"
)

// fluxInterval is the Kustomization's reconcile interval.
const fluxInterval = 5 * time.Second

var kustomizations = schema.GroupResource{Group: "kustomize.toolkit.fluxcd.io", Resource: "kustomizations"}

// TestRealFluxIsHeld: the real kustomize-controller (Flux), pinned by
// hack/tools/flux, applies a new revision of its source to nothing while
// its cluster is fenced: fencegate's hold controller suspends the
// Kustomization. Once the cluster holds the fence again the Kustomization's
// spec is exactly what it was, and the controller applies the revision it
// missed.
func TestRealFluxIsHeld(t *testing.T) {
	start := time.Now()
	since := func() string { return time.Since(start).Round(100 * time.Millisecond).String() }
	crds := fluxCRDs(t)
	cp := cluster.StartForTest(t, cluster.Options{Name: "flux", CRDs: crds})
	t.Logf("%s: control plane up with Flux's CRDs", since())
	artifacts := newArtifactServer(t)
	kc := startKustomizeController(t, cp)
	t.Logf("%s: kustomize-controller serving its health checks", since())
	f := enginetest.NewSwitch(t, active)
	holder := startHolder(t, cp, f, kustomizations)
	ctx := context.Background()
	fx := &fluxRun{t: t, c: cp.Client, kc: kc}

	repo := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1",
		"kind":       "GitRepository",
		"metadata":   map[string]any{"name": "app", "namespace": "default"},
		// No source-controller runs: the spec is never read. The test
		// writes the artifact into the status, as source-controller would.
		"spec": map[string]any{"url": "https://git.example.invalid/app.git", "interval": "1h"},
	}}
	if err := cp.Client.Create(ctx, repo); err != nil {
		t.Fatalf("create GitRepository: %v", err)
	}
	rev1 := fx.publish(repo, artifacts, "v1")

	ks := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1",
		"kind":       "Kustomization",
		"metadata":   map[string]any{"name": "app", "namespace": "default"},
		"spec": map[string]any{
			"interval":  fluxInterval.String(),
			"path":      "./",
			"prune":     false,
			"suspend":   false,
			"sourceRef": map[string]any{"kind": "GitRepository", "name": "app"},
		},
	}}
	if err := cp.Client.Create(ctx, ks); err != nil {
		t.Fatalf("create Kustomization: %v", err)
	}
	created := time.Now()

	// Active: the controller applies v1.
	fx.waitConfigMap("v1", 60*time.Second)
	fx.waitKustomization(ks, "Ready with revision v1 applied", 30*time.Second, func(k *unstructured.Unstructured) bool {
		applied, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
		return applied == rev1 && condition(k, "Ready") == "True"
	})
	t.Logf("%s: v1 applied by kustomize-controller %s after the Kustomization was created", since(), time.Since(created).Round(100*time.Millisecond))
	specBefore, _, _ := unstructured.NestedMap(ks.Object, "spec")

	// Fenced: fencegate suspends the Kustomization, and it goes quiet.
	f.Set(t, fenced)
	fencedAt := time.Now()
	fx.waitKustomization(ks, "spec.suspend true and the hold recorded", 30*time.Second, func(k *unstructured.Unstructured) bool {
		suspended, _, _ := unstructured.NestedBool(k.Object, "spec", "suspend")
		_, recorded := k.GetAnnotations()[hold.RecordAnnotation]
		return suspended && recorded
	})
	held := time.Since(fencedAt)
	fx.waitFor("the Kustomization held and quiet in the hold controller's progress", 30*time.Second, func(context.Context) (bool, error) {
		k, ok := kindProgress(holder.Progress("default"), "Kustomization.kustomize.toolkit.fluxcd.io")
		return ok && k.Held == 1 && k.Quiet == 1, nil
	})
	t.Logf("%s: held %s and quiet %s after the fence was set to fenced", since(), held.Round(100*time.Millisecond), time.Since(fencedAt).Round(100*time.Millisecond))

	// A new revision while held: nothing fetches or applies it. A revision
	// change of the source makes kustomize-controller reconcile at once,
	// so a few intervals of v1 is the hold's doing, not the schedule's.
	rev2 := fx.publish(repo, artifacts, "v2")
	published := time.Now()
	quiet := 3 * fluxInterval
	for time.Since(published) < quiet {
		if got := fx.configMapRevision(); got != "v1" {
			t.Fatalf("while held, %s after v2 was published, the ConfigMap says revision %q, want v1\nkustomize-controller log:\n%s", time.Since(published).Round(100*time.Millisecond), got, kc.Tail(40))
		}
		time.Sleep(250 * time.Millisecond)
	}
	if err := cp.Client.Get(ctx, client.ObjectKeyFromObject(ks), ks); err != nil {
		t.Fatal(err)
	}
	if attempted, _, _ := unstructured.NestedString(ks.Object, "status", "lastAttemptedRevision"); attempted != rev1 {
		t.Errorf("while held the controller attempted revision %q, want it still at %q", attempted, rev1)
	}
	if n := artifacts.fetches("v2"); n != 0 {
		t.Errorf("while held the controller fetched the v2 artifact %d times", n)
	}
	t.Logf("%s: v2 published; %s later the ConfigMap still says v1 and v2 was never fetched", since(), quiet)

	// Active again: the Kustomization is released exactly, and v2 applied.
	f.Set(t, active)
	releasedAt := time.Now()
	fx.waitKustomization(ks, "spec.suspend false and the hold record gone", 30*time.Second, func(k *unstructured.Unstructured) bool {
		suspended, found, _ := unstructured.NestedBool(k.Object, "spec", "suspend")
		_, recorded := k.GetAnnotations()[hold.RecordAnnotation]
		return found && !suspended && !recorded
	})
	released := time.Since(releasedAt)
	specAfter, _, _ := unstructured.NestedMap(ks.Object, "spec")
	if d := cmp.Diff(specBefore, specAfter); d != "" {
		t.Errorf("the Kustomization's spec after the release differs from before the hold (-before +after):\n%s", d)
	}
	fx.waitConfigMap("v2", 15*time.Second)
	t.Logf("%s: released %s and v2 applied %s after the fence was set to active", since(), released.Round(100*time.Millisecond), time.Since(releasedAt).Round(100*time.Millisecond))
	fx.waitKustomization(ks, "Ready with revision v2 applied", 15*time.Second, func(k *unstructured.Unstructured) bool {
		applied, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
		return applied == rev2 && condition(k, "Ready") == "True"
	})
}

func kindProgress(p hold.Progress, kind string) (hold.KindProgress, bool) {
	for _, k := range p.Kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return hold.KindProgress{}, false
}

// fluxCRDs returns the CRDs of the pinned Flux modules, read from the
// module cache (pinned.Flux): kustomize-controller's and its source kinds'.
func fluxCRDs(t *testing.T) []string {
	t.Helper()
	flux, err := pinned.Flux(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CRDs of kustomize-controller %s and source-controller %s", flux.KustomizeController.Version, flux.SourceController.Version)
	return flux.CRDs
}

// startKustomizeController runs the kustomize-controller that
// hack/build-tools.sh flux built against the control plane, with its log in
// the test's temporary directory (its tail printed if the test fails).
func startKustomizeController(t *testing.T, cp *cluster.ControlPlane) *proc.Process {
	t.Helper()
	bin := filepath.Join(cp.Assets, "kustomize-controller")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kustomize-controller not built (hack/build-tools.sh flux): %v", err)
	}
	health, err := proc.FreeAddress()
	if err != nil {
		t.Fatal(err)
	}
	// It has no --kubeconfig flag: controller-runtime reads KUBECONFIG,
	// and proc.Start hands the child the test's environment.
	t.Setenv("KUBECONFIG", cp.Kubeconfig)
	p, err := proc.Start(bin, t.TempDir(), "kustomize-controller",
		"--watch-all-namespaces",
		"--metrics-addr=0",
		"--health-addr="+health,
		"--enable-leader-election=false",
		"--no-remote-bases",
		"--log-encoding=console",
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("last lines of %s:\n%s", p.LogPath, p.Tail(60))
		}
	})
	t.Cleanup(func() {
		if err := p.Stop(10 * time.Second); err != nil {
			t.Errorf("stop kustomize-controller: %v", err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WaitHealthy(ctx, http.DefaultClient, "http://"+health+"/readyz"); err != nil {
		t.Fatalf("%v\n%s", err, p.Tail(40))
	}
	return p
}

// artifactServer serves source artifacts as source-controller does: a
// gzipped tarball per revision, by path, counting the fetches of each.
type artifactServer struct {
	*httptest.Server
	mu       sync.Mutex
	tarballs map[string][]byte // by path
	fetched  map[string]int    // by revision
}

func newArtifactServer(t *testing.T) *artifactServer {
	t.Helper()
	a := &artifactServer{tarballs: map[string][]byte{}, fetched: map[string]int{}}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		body, ok := a.tarballs[r.URL.Path]
		if ok {
			a.fetched[strings.TrimSuffix(filepath.Base(r.URL.Path), ".tar.gz")]++
		}
		a.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/gzip")
		_, _ = w.Write(body)
	}))
	t.Cleanup(a.Close)
	return a
}

// add serves revision's tarball and returns its URL.
func (a *artifactServer) add(path string, tarball []byte) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.tarballs[path] = tarball
	return a.URL + path
}

func (a *artifactServer) fetches(revision string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fetched[revision]
}

// kustomizationTarball is a kustomization of one ConfigMap whose data says
// revision.
func kustomizationTarball(t *testing.T, revision string) []byte {
	t.Helper()
	files := []struct{ name, body string }{
		{"kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- configmap.yaml\n"},
		{"configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: default\ndata:\n  revision: " + revision + "\n"},
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// fluxRun is what the steps of TestRealFluxIsHeld share.
type fluxRun struct {
	t  *testing.T
	c  client.Client
	kc *proc.Process
}

// publish serves the tarball of revision and writes it into the
// GitRepository's status.artifact, as source-controller does; it returns
// the artifact's revision.
func (fx *fluxRun) publish(repo *unstructured.Unstructured, a *artifactServer, revision string) string {
	t := fx.t
	t.Helper()
	tarball := kustomizationTarball(t, revision)
	sum := sha256.Sum256(tarball)
	commit := sha1.Sum([]byte(revision))
	path := fmt.Sprintf("/gitrepository/%s/%s/%s.tar.gz", repo.GetNamespace(), repo.GetName(), revision)
	artifact := map[string]any{
		"path":           strings.TrimPrefix(path, "/"),
		"url":            a.add(path, tarball),
		"revision":       "main@sha1:" + hex.EncodeToString(commit[:]),
		"digest":         "sha256:" + hex.EncodeToString(sum[:]),
		"size":           int64(len(tarball)),
		"lastUpdateTime": time.Now().UTC().Format(time.RFC3339),
	}
	ctx := context.Background()
	if err := fx.c.Get(ctx, client.ObjectKeyFromObject(repo), repo); err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedMap(repo.Object, artifact, "status", "artifact"); err != nil {
		t.Fatal(err)
	}
	if err := fx.c.Status().Update(ctx, repo); err != nil {
		t.Fatalf("write the GitRepository's artifact %s: %v", revision, err)
	}
	return artifact["revision"].(string)
}

func (fx *fluxRun) configMapRevision() string {
	var cm corev1.ConfigMap
	if err := fx.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "app"}, &cm); err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return cm.Data["revision"]
}

func (fx *fluxRun) waitConfigMap(revision string, timeout time.Duration) {
	fx.t.Helper()
	fx.waitFor("the ConfigMap with revision "+revision, timeout, func(context.Context) (bool, error) {
		return fx.configMapRevision() == revision, nil
	})
}

func (fx *fluxRun) waitKustomization(ks *unstructured.Unstructured, what string, timeout time.Duration, ok func(*unstructured.Unstructured) bool) {
	fx.t.Helper()
	fx.waitFor("the Kustomization: "+what, timeout, func(ctx context.Context) (bool, error) {
		if err := fx.c.Get(ctx, client.ObjectKeyFromObject(ks), ks); err != nil {
			return false, nil
		}
		return ok(ks), nil
	})
}

// waitFor polls ok until it holds; if it does not within timeout it fails
// the test with where the Kustomization and the controller stand.
func (fx *fluxRun) waitFor(what string, timeout time.Duration, ok func(context.Context) (bool, error)) {
	t := fx.t
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, ok)
	if err == nil {
		return
	}
	var ks unstructured.Unstructured
	ks.SetGroupVersionKind(schema.GroupVersionKind{Group: kustomizations.Group, Version: "v1", Kind: "Kustomization"})
	state := "(unreadable)"
	if err := fx.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "app"}, &ks); err == nil {
		spec, _, _ := unstructured.NestedMap(ks.Object, "spec")
		status, _, _ := unstructured.NestedMap(ks.Object, "status")
		state = fmt.Sprintf("annotations=%v spec=%v status=%v", ks.GetAnnotations(), spec, status)
	}
	t.Fatalf("waiting %s for %s: %v\nConfigMap revision: %s\nKustomization: %s\nkustomize-controller log:\n%s",
		timeout, what, err, fx.configMapRevision(), state, fx.kc.Tail(40))
}

// condition returns the status of an object's condition of type typ ("" if
// it has none).
func condition(obj *unstructured.Unstructured, typ string) string {
	conds, _, _ := unstructured.NestedSlice(obj.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == typ {
			s, _ := m["status"].(string)
			return s
		}
	}
	return ""
}
