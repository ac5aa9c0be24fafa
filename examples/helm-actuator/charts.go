package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	chartv2 "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	repov1 "helm.sh/helm/v4/pkg/repo/v1"
	"sigs.k8s.io/yaml"

	fencegatev1alpha1 "github.com/fencegate/fencegate/api/v1alpha1"
)

// maxDownload bounds an index or a chart archive.
const maxDownload = 16 << 20

// charts fetches charts from their repositories and keeps each one it
// fetched, by repository, name and version as the Component asks for it.
type charts struct {
	http *http.Client
	mu   sync.Mutex
	got  map[fencegatev1alpha1.ChartRef]*chartv2.Chart
}

func newCharts() *charts {
	return &charts{http: &http.Client{}, got: map[fencegatev1alpha1.ChartRef]*chartv2.Chart{}}
}

// get is the chart ref names, from the repository's index.
func (c *charts) get(ctx context.Context, ref fencegatev1alpha1.ChartRef) (*chartv2.Chart, error) {
	if ref.Repository == "" || ref.Name == "" {
		return nil, fmt.Errorf("spec.chart names no repository and chart (repository %q, name %q)", ref.Repository, ref.Name)
	}
	c.mu.Lock()
	ch, ok := c.got[ref]
	c.mu.Unlock()
	if ok {
		return ch, nil
	}
	base := strings.TrimSuffix(ref.Repository, "/") + "/"
	data, err := c.download(ctx, base+"index.yaml")
	if err != nil {
		return nil, err
	}
	index := repov1.NewIndexFile()
	if err := yaml.Unmarshal(data, index); err != nil {
		return nil, fmt.Errorf("chart repository %s: its index: %w", ref.Repository, err)
	}
	index.SortEntries()
	version, err := index.Get(ref.Name, ref.Version)
	if err != nil {
		return nil, fmt.Errorf("chart repository %s: chart %s version %q: %w", ref.Repository, ref.Name, ref.Version, err)
	}
	if len(version.URLs) == 0 {
		return nil, fmt.Errorf("chart repository %s: chart %s %s has no URL", ref.Repository, ref.Name, version.Version)
	}
	url, err := repov1.ResolveReferenceURL(base, version.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("chart repository %s: chart %s %s: %w", ref.Repository, ref.Name, version.Version, err)
	}
	archive, err := c.download(ctx, url)
	if err != nil {
		return nil, err
	}
	if ch, err = loader.LoadArchive(bytes.NewReader(archive)); err != nil {
		return nil, fmt.Errorf("chart %s: %w", url, err)
	}
	c.mu.Lock()
	c.got[ref] = ch
	c.mu.Unlock()
	return ch, nil
}

func (c *charts) download(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", url, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("download %s: %s", url, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxDownload+1))
	if err != nil {
		return nil, fmt.Errorf("download %s: %w", url, err)
	}
	if len(data) > maxDownload {
		return nil, fmt.Errorf("download %s: larger than %d bytes", url, maxDownload)
	}
	return data, nil
}
