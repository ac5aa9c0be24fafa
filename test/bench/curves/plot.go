package curves

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// role says how a series is drawn: what is measured stands out, its
// anchors and floor beside it, goals as dashed lines without points.
type role int

const (
	measured role = iota
	anchor
	floor
	goal
)

// series is one named line of a plot.
type series struct {
	name   string
	role   role
	points []Point
}

// Plot sizes: about a column of a page.
const (
	plotWidth  = 16 * vg.Centimeter
	plotHeight = 10 * vg.Centimeter
)

var (
	measuredColors = []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff},
	}
	anchorColors = []color.Color{
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
		color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
	}
	floorColors = []color.Color{
		color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff},
		color.RGBA{R: 0xbc, G: 0xbd, B: 0x22, A: 0xff},
	}
	goalColor = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
)

// axes are a plot's title and axis labels; logY draws the y axis on a
// log scale (for latencies that span decades).
type axes struct {
	title, x, y string
	logY        bool
}

// newPlot draws the series on a log x axis ticked at the sizes measured.
func newPlot(a axes, ss []series) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = a.title
	p.X.Label.Text, p.Y.Label.Text = a.x, a.y
	for _, st := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle,
		&p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		st.Font.Variant = "Sans"
	}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.Padding = vg.Millimeter
	p.Legend.XOffs, p.Legend.YOffs = 2*vg.Millimeter, -vg.Millimeter
	p.Add(plotter.NewGrid())

	var xs []float64
	var lo, hi = math.Inf(1), math.Inf(-1)
	measures, anchors, floors := 0, 0, 0
	for _, s := range ss {
		xys := make(plotter.XYs, 0, len(s.points))
		errs := make(plotter.YErrors, 0, len(s.points))
		for _, pt := range s.points {
			if pt.X <= 0 || (a.logY && pt.Y <= 0) {
				continue // not on a log axis
			}
			xys = append(xys, plotter.XY{X: pt.X, Y: pt.Y})
			errs = append(errs, struct{ Low, High float64 }{pt.Y - pt.Lo, pt.Hi - pt.Y})
			xs = append(xs, pt.X)
			lo, hi = min(lo, pt.Lo), max(hi, pt.Hi)
		}
		if len(xys) == 0 {
			continue
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		line.Width = vg.Points(1.5)
		var thumbs []plot.Thumbnailer
		var c color.Color
		switch s.role {
		case measured:
			c = measuredColors[measures%len(measuredColors)]
			measures++
		case anchor:
			c = anchorColors[anchors%len(anchorColors)]
			anchors++
		case floor:
			c = floorColors[floors%len(floorColors)]
			floors++
		case goal:
			c = goalColor
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			line.Width = vg.Points(1)
		}
		line.Color = c
		p.Add(line)
		thumbs = append(thumbs, line)
		if s.role != goal {
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			sc.GlyphStyle = draw.GlyphStyle{Color: c, Radius: vg.Points(2.5), Shape: shapeOf(s.role)}
			p.Add(sc)
			thumbs = append(thumbs, sc)
			if spread(errs) {
				bars, err := plotter.NewYErrorBars(errorPoints{xys, errs})
				if err != nil {
					return nil, fmt.Errorf("%s: %w", s.name, err)
				}
				bars.Color = c
				p.Add(bars)
			}
		}
		p.Legend.Add(s.name, thumbs...)
	}
	if len(xs) == 0 {
		return nil, fmt.Errorf("%s: nothing to draw", a.title)
	}
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks(xs)
	xmin, xmax := slices.Min(xs), slices.Max(xs)
	p.X.Min, p.X.Max = xmin/1.25, xmax*1.25
	if a.logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Min, p.Y.Max = lo/1.5, hi*4 // room for the legend
	} else {
		p.Y.Tick.Marker = plainTicks{}
		p.Y.Min, p.Y.Max = 0, hi*1.45
	}
	return p, nil
}

func shapeOf(r role) draw.GlyphDrawer {
	switch r {
	case anchor:
		return draw.BoxGlyph{}
	case floor:
		return draw.TriangleGlyph{}
	default:
		return draw.CircleGlyph{}
	}
}

// spread is whether any point has a range to draw.
func spread(errs plotter.YErrors) bool {
	for _, e := range errs {
		if e.Low > 0 || e.High > 0 {
			return true
		}
	}
	return false
}

// errorPoints are points with their ranges, as YErrorBars takes them.
type errorPoints struct {
	plotter.XYs
	plotter.YErrors
}

// plainTicks are the default ticks labelled without trailing zeros: 25,
// not 25.00.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" {
			ticks[i].Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
	}
	return ticks
}

// logTicks are log ticks labelled with their digits grouped: 10,000.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	for i, t := range ticks {
		if t.Label != "" && t.Value >= 1000 {
			ticks[i].Label = thousands(t.Value)
		}
	}
	return ticks
}

// sizeTicks ticks an axis at the sizes measured.
func sizeTicks(xs []float64) plot.ConstantTicks {
	var ticks plot.ConstantTicks
	for _, x := range slices.Compact(slices.Sorted(slices.Values(xs))) {
		ticks = append(ticks, plot.Tick{Value: x, Label: thousands(x)})
	}
	return ticks
}

// thousands formats x rounded, its digits grouped by thousands: 10,000.
func thousands(x float64) string {
	s := strconv.FormatFloat(math.Round(math.Abs(x)), 'f', 0, 64)
	var b strings.Builder
	if x < 0 {
		b.WriteByte('-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// svg renders p as an SVG document without its XML declaration, to be
// written alone or inside an HTML page.
func svg(p *plot.Plot) ([]byte, error) {
	c := vgsvg.New(plotWidth, plotHeight)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("render %q: %w", p.Title.Text, err)
	}
	// The page names fonts that most browsers have when Liberation's
	// (which measured the text) are not installed.
	out := bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans;"),
		[]byte("font-family:Liberation Sans,Arial,Helvetica,sans-serif;"))
	if i := bytes.Index(out, []byte("<svg")); i > 0 {
		out = out[i:]
	}
	return out, nil
}
