package results

import (
	"encoding/xml"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/jstemmer/go-junit-report/v2/junit"
)

// WriteXML writes the report as a JUnit XML document (go-junit-report's
// schema, as Jenkins, GitLab and GitHub test reporters read it) with one
// suite named suiteName, a case per test, classname the package.
// Characters XML cannot hold, such as the escape codes of coloured output,
// become U+FFFD, so any test output makes a valid document.
func (r *Report) WriteXML(w io.Writer, suiteName string) error {
	suite := junit.Testsuite{Name: suiteName, Time: xmlSeconds(r.Elapsed)}
	if !r.Started.IsZero() {
		suite.SetTimestamp(r.Started.UTC())
	}
	for _, c := range r.Cases {
		tc := junit.Testcase{Classname: c.Package, Name: c.Name, Time: xmlSeconds(c.Elapsed)}
		switch c.Status {
		case Failed:
			tc.Failure = &junit.Result{Message: c.Message, Data: xmlChars(c.Output)}
		case Skipped:
			tc.Skipped = &junit.Result{Message: c.Message}
		}
		suite.AddTestcase(tc)
	}
	var doc junit.Testsuites
	doc.AddSuite(suite)
	doc.Time = suite.Time
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("writing JUnit XML: %w", err)
	}
	if err := doc.WriteXML(w); err != nil {
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
	if n := r.KeptOff(); n > 0 {
		fmt.Fprintf(&b, "NOT VERIFIED: the cluster kept the pods of %d checks off every node their claims fit (each says by what): the run says nothing of them\n", n)
	}
	if n := r.Unverified(); n > 0 {
		fmt.Fprintf(&b, "WARNING: %d checks of what the manifest enables were not verified (allowed by --allow-unverified): a pass says nothing of them\n", n)
	}
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

// FailureTails are, for each failed test in the order it started, a
// "--- FAIL:" line with its name, package and time and the last lines of
// its output (its message where it printed nothing); "" when none failed.
func (r *Report) FailureTails(lines int) string {
	var b strings.Builder
	for _, c := range r.Cases {
		if c.Status != Failed {
			continue
		}
		fmt.Fprintf(&b, "--- FAIL: %s (%s, %s)\n", c.Name, c.Package, c.Elapsed)
		out := strings.TrimRight(c.Output, "\n")
		if strings.TrimSpace(out) == "" {
			out = c.Message
		}
		l := strings.Split(out, "\n")
		if len(l) > lines {
			if cut := len(l) - lines; cut == 1 {
				b.WriteString("    [1 line before]\n")
			} else {
				fmt.Fprintf(&b, "    [%d lines before]\n", cut)
			}
			l = l[len(l)-lines:]
		}
		for _, line := range l {
			fmt.Fprintf(&b, "    %s\n", line)
		}
	}
	return b.String()
}
