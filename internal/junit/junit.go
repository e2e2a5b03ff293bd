// Package junit turns the event stream of go test -json into a JUnit XML
// report, which CI systems display per test, and a short table for people.
// Each leaf test is one case; a package that failed outside any test (it
// did not build, or TestMain failed) is a case of its own, so that no
// failure is lost between the two formats.
package junit

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"
)

// Status is a case's result, spelt as go test spells it.
type Status string

// Statuses.
const (
	Passed  Status = "PASS"
	Failed  Status = "FAIL"
	Skipped Status = "SKIP"
)

// Case is one test's result.
type Case struct {
	// Package is the test's import path.
	Package string
	// Name is the test's full name, "TestParent/child" for a subtest; for
	// a package that failed outside any test, the package's import path.
	Name    string
	Status  Status
	Elapsed time.Duration
	// Message is why the test was skipped, or the first thing it reported
	// when it failed, without the file:line prefix of t.Log.
	Message string
	// Output is what the test printed, without go test's framing lines
	// ("=== RUN", "--- FAIL: ...").
	Output string
}

// Report is the result of one go test -json run.
type Report struct {
	// Cases are in the order their packages started, each package's tests
	// in the order they started.
	Cases []Case
	// Elapsed is the sum of the packages' run times.
	Elapsed time.Duration
	// Started is the time of the first event, if events carry times.
	Started time.Time
	// Stray are input lines that were not events, e.g. compiler errors an
	// older go wrote to stderr when stderr is merged into the stream.
	Stray []string
}

// event is a test2json event (go doc cmd/test2json) or a build event
// (go help buildjson), which go test -json interleaves.
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
	ImportPath  string
}

type testKey struct{ pkg, test string }

type testRun struct {
	testKey
	// result is the last pass, fail, skip or bench action; "" for a test
	// that never finished.
	result  string
	elapsed float64
	output  strings.Builder
}

type packageRun struct {
	name        string
	result      string
	elapsed     float64
	failedBuild string
	output      strings.Builder
	tests       []*testRun
}

type parser struct {
	report   Report
	packages map[string]*packageRun
	order    []*packageRun
	tests    map[testKey]*testRun
	// builds holds build output by package path (an ImportPath without its
	// " [pkg.test]" variant suffix).
	builds map[string]*strings.Builder
	// strayBuild is the package of the last "# pkg" header among stray
	// lines: an older go's compiler errors follow such a header.
	strayBuild string
}

// Parse reads a go test -json stream. Events are decoded leniently, since
// test2json adds fields over time; a line that is not JSON is kept in
// Stray, a line that is broken JSON is an error.
func Parse(r io.Reader) (*Report, error) {
	p := &parser{
		packages: map[string]*packageRun{},
		tests:    map[testKey]*testRun{},
		builds:   map[string]*strings.Builder{},
	}
	br := bufio.NewReader(r)
	for n := 1; ; n++ {
		line, err := br.ReadString('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("reading go test -json output: %w", err)
		}
		if perr := p.line(line); perr != nil {
			return nil, fmt.Errorf("go test -json output line %d: %w", n, perr)
		}
		if err != nil {
			break
		}
	}
	p.finish()
	return &p.report, nil
}

func (p *parser) line(line string) error {
	trimmed := strings.TrimSpace(line)
	if trimmed == "" {
		return nil
	}
	if !strings.HasPrefix(trimmed, "{") {
		p.report.Stray = append(p.report.Stray, strings.TrimRight(line, "\r\n"))
		if header, ok := strings.CutPrefix(trimmed, "# "); ok {
			p.strayBuild = packagePath(header)
		} else if p.strayBuild != "" {
			p.build(p.strayBuild).WriteString(line)
		}
		return nil
	}
	var e event
	if err := json.Unmarshal([]byte(trimmed), &e); err != nil {
		return err
	}
	p.event(&e)
	return nil
}

func (p *parser) event(e *event) {
	if p.report.Started.IsZero() && !e.Time.IsZero() {
		p.report.Started = e.Time
	}
	switch e.Action {
	case "build-output":
		p.build(packagePath(e.ImportPath)).WriteString(e.Output)
		return
	case "build-fail":
		// The package's fail event names the failed build; nothing to add.
		return
	}
	pkg := p.pkg(e.Package)
	if e.Test == "" {
		switch e.Action {
		case "output":
			pkg.output.WriteString(e.Output)
		case "pass", "fail", "skip":
			pkg.result, pkg.elapsed, pkg.failedBuild = e.Action, e.Elapsed, e.FailedBuild
		}
		return
	}
	t := p.test(pkg, e.Test)
	switch e.Action {
	case "output":
		t.output.WriteString(e.Output)
	case "pass", "fail", "skip", "bench":
		t.result, t.elapsed = e.Action, e.Elapsed
	}
}

func (p *parser) pkg(name string) *packageRun {
	pkg, ok := p.packages[name]
	if !ok {
		pkg = &packageRun{name: name}
		p.packages[name] = pkg
		p.order = append(p.order, pkg)
	}
	return pkg
}

func (p *parser) test(pkg *packageRun, name string) *testRun {
	k := testKey{pkg.name, name}
	t, ok := p.tests[k]
	if !ok {
		t = &testRun{testKey: k}
		p.tests[k] = t
		pkg.tests = append(pkg.tests, t)
	}
	return t
}

func (p *parser) build(path string) *strings.Builder {
	b, ok := p.builds[path]
	if !ok {
		b = &strings.Builder{}
		p.builds[path] = b
	}
	return b
}

// packagePath drops the variant suffix of a package ID:
// "example.com/p [example.com/p.test]" is built for package example.com/p.
func packagePath(id string) string {
	path, _, _ := strings.Cut(strings.TrimSpace(id), " ")
	return path
}

func (p *parser) finish() {
	// A parent's result only sums up its subtests; it is a case itself
	// when it has none, or when it failed on its own (an error after its
	// subtests passed), which would otherwise go unreported.
	hasSubtests := map[testKey]bool{}
	failedSubtest := map[testKey]bool{}
	for _, t := range p.tests {
		failed := p.status(t) == Failed
		for i, c := range t.test {
			if c != '/' {
				continue
			}
			parent := testKey{t.pkg, t.test[:i]}
			hasSubtests[parent] = true
			failedSubtest[parent] = failedSubtest[parent] || failed
		}
	}
	for _, pkg := range p.order {
		p.report.Elapsed += seconds(pkg.elapsed)
		pkgFailed := false
		for _, t := range pkg.tests {
			status := p.status(t)
			if hasSubtests[t.testKey] && !(status == Failed && !failedSubtest[t.testKey]) {
				continue
			}
			c := Case{Package: t.pkg, Name: t.test, Status: status, Elapsed: seconds(t.elapsed)}
			lines := logLines(t.output.String())
			c.Output = strings.Join(lines, "\n")
			switch {
			case status == Skipped:
				c.Message = lastEntry(lines)
			case status == Failed && t.result == "":
				c.Message = "did not finish"
				if l := firstPanic(lines); l != "" {
					c.Message += ": " + l
				}
			case status == Failed:
				c.Message = firstLine(lines)
			}
			pkgFailed = pkgFailed || status == Failed
			p.report.Cases = append(p.report.Cases, c)
		}
		if pkg.result == "fail" && !pkgFailed {
			p.report.Cases = append(p.report.Cases, p.packageCase(pkg))
		}
	}
}

func (p *parser) status(t *testRun) Status {
	switch t.result {
	case "pass", "bench":
		return Passed
	case "skip":
		return Skipped
	case "fail":
		return Failed
	}
	// go test reports no result for a benchmark that logged nothing; in a
	// package that passed, nothing else can be left unfinished. Otherwise
	// the test binary ended under the test: a panic in another goroutine,
	// a timeout, os.Exit.
	if p.packages[t.pkg].result == "pass" {
		return Passed
	}
	return Failed
}

// packageCase reports a package that failed with no failed test: it did
// not build, or failed before or after its tests (TestMain, a leak check).
func (p *parser) packageCase(pkg *packageRun) Case {
	c := Case{Package: pkg.name, Name: pkg.name, Status: Failed, Elapsed: seconds(pkg.elapsed)}
	var own []string
	buildFailed := pkg.failedBuild != ""
	for _, l := range logLines(pkg.output.String()) {
		if strings.HasSuffix(l, "[build failed]") || strings.HasSuffix(l, "[setup failed]") {
			buildFailed = true
		}
		if !isGoTestSummary(l) {
			own = append(own, l)
		}
	}
	if !buildFailed {
		c.Output = strings.Join(own, "\n")
		c.Message = firstLine(own)
		if c.Message == "" {
			c.Message = "package failed outside its tests"
		}
		return c
	}
	failed := packagePath(pkg.failedBuild)
	if failed == "" {
		failed = pkg.name
	}
	var build []string
	if b, ok := p.builds[failed]; ok {
		build = logLines(b.String())
	}
	c.Output = strings.Join(append(build, own...), "\n")
	c.Message = "build failed"
	for _, l := range build {
		if !strings.HasPrefix(l, "# ") {
			c.Message += ": " + l
			break
		}
	}
	return c
}

// isGoTestSummary reports whether a package output line is one go test
// prints about every package, which says nothing about why it failed.
func isGoTestSummary(l string) bool {
	return l == "PASS" || l == "FAIL" ||
		strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "?   \t")
}

func seconds(s float64) time.Duration {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond)
}

// isFraming reports whether a line is go test's own bookkeeping
// ("=== RUN   TestX", "    --- PASS: TestX/y (0.00s)"), which test2json
// has already turned into events.
func isFraming(l string) bool {
	l = strings.TrimLeft(l, " ")
	if strings.HasPrefix(l, "=== ") {
		return true
	}
	for _, prefix := range []string{"--- PASS: ", "--- FAIL: ", "--- SKIP: ", "--- BENCH: "} {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// logLines splits output into lines, drops framing lines and blank lines
// around the rest, and removes the indentation go test adds to t.Log
// output, so that each log entry starts at the left margin and its
// continuation lines stay indented under it.
func logLines(output string) []string {
	var lines []string
	for _, l := range strings.Split(output, "\n") {
		if !isFraming(l) {
			lines = append(lines, strings.TrimRight(l, " \t\r"))
		}
	}
	for len(lines) > 0 && lines[0] == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	indent := -1
	for _, l := range lines {
		if l == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, " "))
		if indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent {
			lines[i] = l[max(indent, 0):]
		}
	}
	return lines
}

// logPrefix is the location t.Log puts before each entry.
var logPrefix = regexp.MustCompile(`^\S+\.go:\d+: `)

// firstLine is the first line of output, without its location.
func firstLine(lines []string) string {
	for _, l := range lines {
		if l = strings.TrimSpace(l); l != "" {
			return logPrefix.ReplaceAllString(l, "")
		}
	}
	return ""
}

// lastEntry is the last log entry, continuation lines included: a test
// ends with its t.Skip message. Without its location.
func lastEntry(lines []string) string {
	// An entry starts at the left margin, or, when the test also printed
	// to stdout, at the t.Log location it still has below its indentation.
	start := -1
	for i, l := range lines {
		unindented := l != "" && !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t")
		if unindented || logPrefix.MatchString(strings.TrimSpace(l)) {
			start = i
		}
	}
	if start < 0 {
		return firstLine(lines)
	}
	entry := []string{logPrefix.ReplaceAllString(strings.TrimSpace(lines[start]), "")}
	for _, l := range lines[start+1:] {
		entry = append(entry, strings.TrimSpace(l))
	}
	return strings.Join(entry, "\n")
}

// firstPanic is the line saying why a test binary died under a test.
func firstPanic(lines []string) string {
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if strings.HasPrefix(l, "panic: ") || strings.HasPrefix(l, "fatal error: ") {
			return l
		}
	}
	return ""
}

// Failed reports whether any case failed.
func (r *Report) Failed() bool {
	for _, c := range r.Cases {
		if c.Status == Failed {
			return true
		}
	}
	return false
}

// counts returns the number of cases, failed cases and skipped cases.
func (r *Report) counts() (tests, failures, skipped int) {
	for _, c := range r.Cases {
		switch c.Status {
		case Failed:
			failures++
		case Skipped:
			skipped++
		}
	}
	return len(r.Cases), failures, skipped
}
