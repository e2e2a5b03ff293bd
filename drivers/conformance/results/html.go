package results

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"
)

//go:embed report.html
var reportHTML string

var reportTemplate = template.Must(template.New("report").Parse(reportHTML))

// page is what report.html shows.
type page struct {
	Title     string
	Generated time.Time
	Duration  string
	Passed    bool
	Counts    string
	Cases     []pageCase
}

type pageCase struct {
	Name, Status, Elapsed, Message, Output, Link string
}

// WriteHTML writes the report as one self-contained HTML page (styles
// inline, no script, nothing fetched) that a CI system can publish or a
// reader open from disk: a row per case with its result, time and reason,
// a failed case's output folded under it. links maps a case's name to a
// page of its own, relative to this one (a scenario's report).
func (r *Report) WriteHTML(w io.Writer, title string, links map[string]string) error {
	tests, failures, skipped := r.counts()
	p := page{
		Title: title, Generated: time.Now(), Passed: !r.Failed(),
		Counts: fmt.Sprintf("%d checks, %d passed, %d failed, %d skipped", tests, tests-failures-skipped, failures, skipped),
	}
	if r.Elapsed > 0 {
		p.Duration = r.Elapsed.Round(100 * time.Millisecond).String()
	}
	for _, c := range r.Cases {
		pc := pageCase{Name: c.Name, Status: string(c.Status), Elapsed: c.Elapsed.Round(time.Millisecond).String(), Message: c.Message, Link: links[c.Name]}
		if c.Status == Failed {
			pc.Output = c.Output
		}
		p.Cases = append(p.Cases, pc)
	}
	return reportTemplate.Execute(w, p)
}

// WriteHTMLFile writes the report's page to path, whole or not at all,
// creating its folder.
func (r *Report) WriteHTMLFile(path, title string, links map[string]string) error {
	var b bytes.Buffer
	if err := r.WriteHTML(&b, title, links); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return renameio.WriteFile(path, b.Bytes(), 0o644)
}
