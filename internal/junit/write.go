package junit

import (
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"
)

// The JUnit schema as CI systems (Jenkins, GitLab, GitHub test reporters)
// read it: a suite per run, a case per test, classname the package.
type (
	xmlSuites struct {
		XMLName  xml.Name   `xml:"testsuites"`
		Tests    int        `xml:"tests,attr"`
		Failures int        `xml:"failures,attr"`
		Skipped  int        `xml:"skipped,attr"`
		Time     string     `xml:"time,attr"`
		Suites   []xmlSuite `xml:"testsuite"`
	}
	xmlSuite struct {
		Name      string    `xml:"name,attr"`
		Tests     int       `xml:"tests,attr"`
		Failures  int       `xml:"failures,attr"`
		Skipped   int       `xml:"skipped,attr"`
		Time      string    `xml:"time,attr"`
		Timestamp string    `xml:"timestamp,attr,omitempty"`
		Cases     []xmlCase `xml:"testcase"`
	}
	xmlCase struct {
		Classname string      `xml:"classname,attr"`
		Name      string      `xml:"name,attr"`
		Time      string      `xml:"time,attr"`
		Failure   *xmlFailure `xml:"failure,omitempty"`
		Skipped   *xmlSkipped `xml:"skipped,omitempty"`
	}
	xmlFailure struct {
		Message string `xml:"message,attr"`
		// CDATA keeps the output's lines and tabs readable in the file,
		// where character data would escape every newline.
		Output string `xml:",cdata"`
	}
	xmlSkipped struct {
		Message string `xml:"message,attr"`
	}
)

// WriteXML writes the report as a JUnit XML document with one suite named
// suiteName. Characters XML cannot hold, such as the escape codes of
// coloured output, become U+FFFD, so any test output makes a valid document.
func (r *Report) WriteXML(w io.Writer, suiteName string) error {
	tests, failures, skipped := r.counts()
	suite := xmlSuite{
		Name:     suiteName,
		Tests:    tests,
		Failures: failures,
		Skipped:  skipped,
		Time:     xmlSeconds(r.Elapsed),
	}
	if !r.Started.IsZero() {
		suite.Timestamp = r.Started.UTC().Format("2006-01-02T15:04:05")
	}
	for _, c := range r.Cases {
		xc := xmlCase{Classname: c.Package, Name: c.Name, Time: xmlSeconds(c.Elapsed)}
		switch c.Status {
		case Failed:
			xc.Failure = &xmlFailure{Message: c.Message, Output: xmlChars(c.Output)}
		case Skipped:
			xc.Skipped = &xmlSkipped{Message: c.Message}
		}
		suite.Cases = append(suite.Cases, xc)
	}
	doc := xmlSuites{Tests: tests, Failures: failures, Skipped: skipped, Time: suite.Time, Suites: []xmlSuite{suite}}

	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("writing JUnit XML: %w", err)
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("writing JUnit XML: %w", err)
	}
	if _, err := io.WriteString(w, "\n"); err != nil {
		return fmt.Errorf("writing JUnit XML: %w", err)
	}
	return nil
}

// xmlChars replaces what XML 1.0 cannot hold: encoding/xml does so for
// attributes and character data, but not for CDATA.
func xmlChars(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r',
			r >= 0x20 && r <= 0xD7FF,
			r >= 0xE000 && r <= 0xFFFD,
			r >= 0x10000 && r <= 0x10FFFF:
			return r
		}
		return utf8.RuneError
	}, s)
}

func xmlSeconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
}

// Summary is a table of the cases for a terminal: CHECK, RESULT, and as
// DETAIL the skip reason or the first line of the failure, then a line of
// totals. Test names are qualified with their package when the report
// spans several.
func (r *Report) Summary() string {
	packages := map[string]bool{}
	for _, c := range r.Cases {
		packages[c.Package] = true
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tRESULT\tDETAIL")
	for _, c := range r.Cases {
		name := c.Name
		if len(packages) > 1 && c.Name != c.Package {
			name = c.Package + "." + c.Name
		}
		detail, _, _ := strings.Cut(c.Message, "\n")
		// A tab in a detail would start a new column.
		detail = strings.ReplaceAll(detail, "\t", " ")
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, c.Status, detail)
	}
	tw.Flush()
	tests, failures, skipped := r.counts()
	fmt.Fprintf(&b, "%d checks: %d passed, %d failed, %d skipped\n", tests, tests-failures-skipped, failures, skipped)
	// A row without a detail ends in the RESULT column's padding; trailing
	// spaces only get in the way of copying and comparing.
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}
