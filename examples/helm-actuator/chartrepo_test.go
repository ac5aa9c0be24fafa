package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"helm.sh/helm/v4/pkg/chart/common"
	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	chartutil "helm.sh/helm/v4/pkg/chart/v2/util"
	"helm.sh/helm/v4/pkg/provenance"
	repov1 "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"
)

// demoChart is the chart the tests install: a ConfigMap with the greeting
// of its values, a Service (the Component's access endpoint), and a
// pre-delete hook that records an uninstall that ran hooks, as a hook
// that acts beyond the cluster would.
func demoChart(version string) *chartv2.Chart {
	return &chartv2.Chart{
		Metadata: &chartv2.Metadata{APIVersion: chartv2.APIVersionV2, Name: "demo", Version: version},
		Values:   map[string]any{"greeting": "hello"},
		Templates: []*common.File{
			{Name: "templates/configmap.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}
data:
  greeting: {{ .Values.greeting | quote }}
`)},
			{Name: "templates/service.yaml", Data: []byte(`apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}
spec:
  ports:
    - name: http
      port: 8080
`)},
			{Name: "templates/goodbye.yaml", Data: []byte(`apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-goodbye
  annotations:
    helm.sh/hook: pre-delete
data:
  said: goodbye
`)},
		},
	}
}

// serveCharts serves a chart repository of charts: its index.yaml and
// their archives.
func serveCharts(t *testing.T, charts ...*chartv2.Chart) string {
	t.Helper()
	dir := t.TempDir()
	mux := http.NewServeMux()
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	index := repov1.NewIndexFile()
	for _, ch := range charts {
		archive, err := chartutil.Save(ch, dir)
		if err != nil {
			t.Fatal(err)
		}
		digest, err := provenance.DigestFile(archive)
		if err != nil {
			t.Fatal(err)
		}
		if err := index.MustAdd(ch.Metadata, filepath.Base(archive), srv.URL, "sha256:"+digest); err != nil {
			t.Fatal(err)
		}
	}
	data, err := yaml.Marshal(index)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "index.yaml"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	mux.Handle("/", http.FileServer(http.Dir(dir)))
	return srv.URL
}
