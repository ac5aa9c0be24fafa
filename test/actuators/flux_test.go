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
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
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
	cluster.RequireTools(t, append(cluster.ControlPlaneBinaries, "kustomize-controller")...)
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

	repo := fx.create(gitRepository("app"))
	rev1 := fx.publish(repo, artifacts, "v1")
	ks := fx.create(kustomization("app", "./", "app"))
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

// TestRealFluxResumesInDependencyOrder: two Kustomizations of one source,
// apps depending on infra, are held while a new revision is published, and
// released together when the cluster holds the fence again. The real
// kustomize-controller applies the new revision of apps only after infra
// applied it: the hold releases every object at once and keeps the
// dependencies they declare, and Flux applies a dependent only once its
// dependency applied the same revision of their common source.
func TestRealFluxResumesInDependencyOrder(t *testing.T) {
	cluster.RequireTools(t, append(cluster.ControlPlaneBinaries, "kustomize-controller")...)
	crds := fluxCRDs(t)
	cp := cluster.StartForTest(t, cluster.Options{Name: "flux-order", CRDs: crds})
	artifacts := newArtifactServer(t)
	kc := startKustomizeController(t, cp)
	f := enginetest.NewSwitch(t, active)
	holder := startHolder(t, cp, f, kustomizations)
	ctx := context.Background()
	fx := &fluxRun{t: t, c: cp.Client, kc: kc, configMaps: map[string]string{"infra": "infra", "apps": "apps"}}

	repo := fx.create(gitRepository("platform"))
	rev1 := fx.publish(repo, artifacts, "v1")
	infra := fx.create(kustomization("infra", "./infra", "platform"))
	apps := fx.create(kustomization("apps", "./apps", "platform", "infra"))
	for _, ks := range []*unstructured.Unstructured{infra, apps} {
		fx.waitKustomization(ks, "Ready with revision v1 applied", 60*time.Second, func(k *unstructured.Unstructured) bool {
			applied, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
			return applied == rev1 && condition(k, "Ready") == "True"
		})
	}
	specs := map[string]map[string]any{}
	for _, ks := range []*unstructured.Unstructured{infra, apps} {
		specs[ks.GetName()], _, _ = unstructured.NestedMap(ks.Object, "spec")
	}

	// The order the ConfigMaps take v2 in, as the API server stored the
	// writes: a watch from the version both say v1.
	var configMaps corev1.ConfigMapList
	if err := cp.Client.List(ctx, &configMaps, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	clientset, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := clientset.CoreV1().ConfigMaps("default").Watch(watchCtx, metav1.ListOptions{ResourceVersion: configMaps.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	f.Set(t, fenced)
	fx.waitFor("both Kustomizations held and quiet", 30*time.Second, func(context.Context) (bool, error) {
		k, ok := kindProgress(holder.Progress("default"), "Kustomization.kustomize.toolkit.fluxcd.io")
		return ok && k.Held == 2 && k.Quiet == 2, nil
	})
	rev2 := fx.publish(repo, artifacts, "v2")
	time.Sleep(fluxInterval)
	if got := fx.revisions(); got != "apps=v1 infra=v1" {
		t.Fatalf("while held, %s after v2 was published: %s, want both at v1", fluxInterval, got)
	}

	logBefore, err := os.ReadFile(kc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	f.Set(t, active)
	var order []string
	deadline := time.After(60 * time.Second)
	for len(order) < 2 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the ConfigMap watch ended")
			}
			cm, isConfigMap := ev.Object.(*corev1.ConfigMap)
			if isConfigMap && cm.Data["revision"] == "v2" && !slices.Contains(order, cm.Name) {
				order = append(order, cm.Name)
			}
		case <-deadline:
			t.Fatalf("60 s after the release the ConfigMaps took v2 in the order %v; revisions: %s\nkustomize-controller log:\n%s", order, fx.revisions(), kc.Tail(40))
		}
	}
	if !slices.Equal(order, []string{"infra", "apps"}) {
		t.Errorf("after the release the ConfigMaps took v2 in the order %v, want infra before apps, which depends on it", order)
	}
	for _, ks := range []*unstructured.Unstructured{infra, apps} {
		fx.waitKustomization(ks, "Ready with revision v2 applied and the hold record gone", 30*time.Second, func(k *unstructured.Unstructured) bool {
			applied, _, _ := unstructured.NestedString(k.Object, "status", "lastAppliedRevision")
			_, recorded := k.GetAnnotations()[hold.RecordAnnotation]
			return applied == rev2 && condition(k, "Ready") == "True" && !recorded
		})
		spec, _, _ := unstructured.NestedMap(ks.Object, "spec")
		if d := cmp.Diff(specs[ks.GetName()], spec); d != "" {
			t.Errorf("%s's spec after the release differs from before the hold (-before +after):\n%s", ks.GetName(), d)
		}
	}
	log, err := os.ReadFile(kc.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("released together; the ConfigMaps took v2 in the order %v; after the release kustomize-controller deferred apps %d time(s) for a dependency not yet at the revision",
		order, strings.Count(string(log[len(logBefore):]), "Dependencies do not meet ready condition"))
}

func kindProgress(p hold.Progress, kind string) (hold.KindProgress, bool) {
	for _, k := range p.Kinds {
		if k.Kind == kind {
			return k, true
		}
	}
	return hold.KindProgress{}, false
}

// gitRepository is a GitRepository named name. No source-controller runs:
// its spec is never read, and fluxRun.publish writes the artifact into its
// status, as source-controller would.
func gitRepository(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "source.toolkit.fluxcd.io/v1",
		"kind":       "GitRepository",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       map[string]any{"url": "https://git.example.invalid/" + name + ".git", "interval": "1h"},
	}}
}

// kustomization is a Kustomization named name that applies dir of the
// GitRepository source, after the Kustomizations dependsOn names.
func kustomization(name, dir, source string, dependsOn ...string) *unstructured.Unstructured {
	spec := map[string]any{
		"interval":  fluxInterval.String(),
		"path":      dir,
		"prune":     false,
		"suspend":   false,
		"sourceRef": map[string]any{"kind": "GitRepository", "name": source},
	}
	if len(dependsOn) > 0 {
		deps := []any{}
		for _, d := range dependsOn {
			deps = append(deps, map[string]any{"name": d})
		}
		spec["dependsOn"] = deps
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kustomize.toolkit.fluxcd.io/v1",
		"kind":       "Kustomization",
		"metadata":   map[string]any{"name": name, "namespace": "default"},
		"spec":       spec,
	}}
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
	bin := cluster.RequireTool(t, "kustomize-controller")
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
		// A dependent whose dependency is not ready yet tries again this
		// soon, not after the default 30 s.
		"--requeue-dependency=1s",
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

// kustomizationTarball is a source with a kustomization in each directory
// of configMaps ("." for the root), of one ConfigMap named as its entry
// says, whose data says revision.
func kustomizationTarball(t *testing.T, revision string, configMaps map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, dir := range slices.Sorted(maps.Keys(configMaps)) {
		files := []struct{ name, body string }{
			{"kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- configmap.yaml\n"},
			{"configmap.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: " + configMaps[dir] + "\n  namespace: default\ndata:\n  revision: " + revision + "\n"},
		}
		for _, f := range files {
			hdr := &tar.Header{Name: path.Join(dir, f.name), Mode: 0o644, Size: int64(len(f.body)), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
			if err := tw.WriteHeader(hdr); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(f.body)); err != nil {
				t.Fatal(err)
			}
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

// fluxRun is what the steps of a Flux test share.
type fluxRun struct {
	t  *testing.T
	c  client.Client
	kc *proc.Process
	// configMaps are the source's kustomizations: the ConfigMap of each
	// directory (kustomizationTarball); nil: one, "app", at the root.
	configMaps map[string]string
}

// publish serves the tarball of revision and writes it into the
// GitRepository's status.artifact, as source-controller does; it returns
// the artifact's revision.
func (fx *fluxRun) publish(repo *unstructured.Unstructured, a *artifactServer, revision string) string {
	t := fx.t
	t.Helper()
	tarball := kustomizationTarball(t, revision, fx.sourceConfigMaps())
	sum := sha256.Sum256(tarball)
	commit := sha1.Sum([]byte(revision))
	artifactPath := fmt.Sprintf("/gitrepository/%s/%s/%s.tar.gz", repo.GetNamespace(), repo.GetName(), revision)
	artifact := map[string]any{
		"path":           strings.TrimPrefix(artifactPath, "/"),
		"url":            a.add(artifactPath, tarball),
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

// create creates obj, or fails the test.
func (fx *fluxRun) create(obj *unstructured.Unstructured) *unstructured.Unstructured {
	fx.t.Helper()
	if err := fx.c.Create(context.Background(), obj); err != nil {
		fx.t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	return obj
}

func (fx *fluxRun) configMapRevision() string { return fx.revisionOf("app") }

// revisions are the revisions the source's ConfigMaps say, by name.
func (fx *fluxRun) revisions() string {
	configMaps := fx.sourceConfigMaps()
	var says []string
	for _, dir := range slices.Sorted(maps.Keys(configMaps)) {
		says = append(says, configMaps[dir]+"="+fx.revisionOf(configMaps[dir]))
	}
	return strings.Join(says, " ")
}

// sourceConfigMaps is configMaps, or the one ConfigMap "app" at the root.
func (fx *fluxRun) sourceConfigMaps() map[string]string {
	if fx.configMaps == nil {
		return map[string]string{".": "app"}
	}
	return fx.configMaps
}

// revisionOf is the revision ConfigMap name says.
func (fx *fluxRun) revisionOf(name string) string {
	var cm corev1.ConfigMap
	if err := fx.c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: name}, &cm); err != nil {
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
	var list unstructured.UnstructuredList
	list.SetGroupVersionKind(schema.GroupVersionKind{Group: kustomizations.Group, Version: "v1", Kind: "KustomizationList"})
	var states []string
	if err := fx.c.List(context.Background(), &list, client.InNamespace("default")); err != nil {
		states = append(states, fmt.Sprintf("(unreadable: %v)", err))
	}
	for _, ks := range list.Items {
		spec, _, _ := unstructured.NestedMap(ks.Object, "spec")
		status, _, _ := unstructured.NestedMap(ks.Object, "status")
		states = append(states, fmt.Sprintf("%s: annotations=%v spec=%v status=%v", ks.GetName(), ks.GetAnnotations(), spec, status))
	}
	t.Fatalf("waiting %s for %s: %v\nConfigMap revisions: %s\nKustomizations:\n%s\nkustomize-controller log:\n%s",
		timeout, what, err, fx.revisions(), strings.Join(states, "\n"), fx.kc.Tail(40))
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
