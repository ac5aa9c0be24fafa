package curves

import (
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Page is the HTML report: a header, the figures and what was left out.
type Page struct {
	// Generated is when the page was written; Commit the checkout.
	Generated time.Time
	Commit    string
	// Sources name the files the figures were drawn from.
	Sources []string
	Note    string
	Figures []Figure
	Missing []string
}

// page is what the template shows: the figures rendered.
type page struct {
	Page
	SVGs []renderedFigure
}

type renderedFigure struct {
	Figure
	SVG template.HTML
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>fencegate's cost curves, {{.Generated.UTC.Format "2006-01-02 15:04 MST"}}</title>
<style>
body { font-family: sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem; color: #222; line-height: 1.4; }
figure { margin: 2rem 0; }
figure svg { width: 100%; height: auto; }
figcaption { font-size: 0.9rem; color: #444; }
.note { background: #fff6d5; padding: 0.5rem; }
</style>
</head>
<body>
<h1>fencegate's cost curves</h1>
<p>Written {{.Generated.UTC.Format "2006-01-02 15:04 MST"}}, commit {{.Commit}}, from {{range $i, $s := .Sources}}{{if $i}}, {{end}}<code>{{$s}}</code>{{end}}.
Each plot shows fencegate beside its anchors and its floor, measured in the same run on the same machine.</p>
{{- if .Note}}
<p class="note">{{.Note}}</p>
{{- end}}
{{- range .SVGs}}
<figure id="{{.Name}}">
<h2>{{.Title}}</h2>
{{.SVG}}
<figcaption>{{.Caption}}</figcaption>
</figure>
{{- end}}
{{- if .Missing}}
<h2>Left out</h2>
<ul>
{{- range .Missing}}
<li>{{.}}</li>
{{- end}}
</ul>
{{- end}}
</body>
</html>
`))

// WriteHTML writes p as one self-contained HTML page, its plots inline.
func WriteHTML(w io.Writer, p Page) error {
	data := page{Page: p}
	for _, f := range p.Figures {
		s, err := svg(f.Plot)
		if err != nil {
			return err
		}
		data.SVGs = append(data.SVGs, renderedFigure{Figure: f, SVG: template.HTML(s)}) //nolint:gosec // drawn here, not input
	}
	if err := pageTemplate.Execute(w, data); err != nil {
		return fmt.Errorf("write the HTML report: %w", err)
	}
	return nil
}

// WriteSVGs writes each figure to dir/<name>.svg and returns the paths.
func WriteSVGs(dir string, figs []Figure) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("plot directory: %w", err)
	}
	var paths []string
	for _, f := range figs {
		s, err := svg(f.Plot)
		if err != nil {
			return paths, err
		}
		path := filepath.Join(dir, f.Name+".svg")
		if err := os.WriteFile(path, s, 0o644); err != nil {
			return paths, fmt.Errorf("write %s: %w", path, err)
		}
		paths = append(paths, path)
	}
	return paths, nil
}
