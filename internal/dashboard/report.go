package dashboard

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/scenarios"
)

// Report is a scenario run's static report: one self-contained HTML file
// (its styles inline, no script, no external asset) that a CI system can
// publish or a reader can open from disk, with a step per scenario step
// (expected against actual outcomes, the allocation table and the picture
// of the cluster). A test run's page is results.Report.WriteHTML.
type Report struct {
	Title     string
	Summary   string
	Generated time.Time
	// Duration is how long the run took, in words; "" if unknown.
	Duration string
	Passed   bool
	// Error is why a run stopped before its end.
	Error string
	Steps []ReportStep
}

// ReportStep is one scenario step's outcome.
type ReportStep struct {
	Name         string
	Expectations []scenarios.ExpectationResult
	Table        *Table
	// Page is the cluster's picture after the step.
	Page *Page
}

// Table is a table of text cells.
type Table struct {
	Header []string
	Body   [][]string
}

// WriteReport writes a report's HTML.
func WriteReport(w io.Writer, r *Report) error {
	return pageTemplate.ExecuteTemplate(w, "report", r)
}

// WriteReportFile writes a report's HTML to a file, whole or not at all,
// creating its directory.
func WriteReportFile(path string, r *Report) error {
	var b bytes.Buffer
	if err := WriteReport(&b, r); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, b.Bytes(), 0o644)
}

// ScenarioReport is the report of a scenario run: every step the run
// reached, and runErr, the error that stopped it, if any.
func ScenarioReport(ctx context.Context, s *scenarios.Scenario, res *scenarios.Result, runErr error) (*Report, error) {
	r := &Report{
		Title:     fmt.Sprintf("Scenario %s: %s", s.Name, s.Title),
		Summary:   s.Summary,
		Generated: time.Now(),
	}
	if runErr != nil {
		r.Error = runErr.Error()
	}
	if res == nil {
		return r, nil
	}
	if res.Duration > 0 {
		r.Duration = res.Duration.Round(100 * time.Millisecond).String()
	}
	r.Passed = runErr == nil && res.Passed() && len(res.Steps) == len(s.Steps)
	for _, st := range res.Steps {
		rs := ReportStep{Name: st.Name, Expectations: st.Expectations}
		if len(st.Rows) > 0 {
			header, body := allocation.Cells(st.Rows)
			rs.Table = &Table{Header: header, Body: body}
		}
		if st.Snapshot != nil {
			p, err := Build(ctx, st.Name, st.Snapshot)
			if err != nil {
				return nil, fmt.Errorf("drawing step %q: %w", st.Name, err)
			}
			rs.Page = p
		}
		r.Steps = append(r.Steps, rs)
	}
	return r, nil
}
