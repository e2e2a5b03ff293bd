package dashboard

import (
	"bytes"
	"embed"
	"html/template"
	"io"
	"strings"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/internal/drametrics"
)

//go:embed page.html report.html
var pageFS embed.FS

var pageTemplate = template.Must(template.New("page.html").Funcs(template.FuncMap{
	"join": strings.Join,
	"stateText": func(t Tile) string {
		return strings.Join(t.States, ", ")
	},
	"claimsInUse":      drametrics.FormatClaimsInUse,
	"claimsInUseTotal": func(m map[string]float64) float64 { return m[drametrics.AnyDriver] },
	"withRoom": func(pts []allocation.PartitionType) (n int) {
		for _, pt := range pts {
			if pt.Allocatable > 0 {
				n++
			}
		}
		return n
	},
}).ParseFS(pageFS, "page.html", "report.html"))

// Options of a rendered page.
type Options struct {
	// Live adds the script that follows the cluster through the server's
	// events; without it (or without JavaScript) the page is complete but
	// static.
	Live bool
	// EventsURL is where the live page reads its events.
	EventsURL string
	// Large sets the projector type size.
	Large bool
	// LargeURL and NormalURL switch the type size.
	LargeURL, NormalURL string
	// MetricsURL, if set, is where the live page reads its metrics panel
	// every few seconds and on every change of the cluster.
	MetricsURL string
}

type pageData struct {
	*Page
	Options
}

// Render writes the whole page.
func Render(w io.Writer, p *Page, o Options) error {
	return pageTemplate.ExecuteTemplate(w, "page", pageData{p, o})
}

// RenderMetrics writes the metrics panel of a snapshot of the cluster's
// DRA metrics.
func RenderMetrics(w io.Writer, s *drametrics.Snapshot) error {
	return pageTemplate.ExecuteTemplate(w, "metrics", s)
}

// RenderView writes the page's view alone: what a live page swaps in.
func RenderView(p *Page) (string, error) {
	var b bytes.Buffer
	err := pageTemplate.ExecuteTemplate(&b, "view", pageData{Page: p})
	return b.String(), err
}
