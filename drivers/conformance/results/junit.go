// Package results holds a test run's results as cases (a test, a check,
// or a package that failed outside its tests) and writes them as JUnit XML,
// which CI systems display per test, and as a short table for people. The
// cases come from the conformance suite run in-process, or from the event
// stream of go test -json: gotestsum's testjson reads the stream,
// go-junit-report's junit writes the XML, and this package decides what a
// case is and says why it failed or was skipped. Each leaf test is one
// case; a package that failed outside any test (it did not build, or
// TestMain failed) is a case of its own, so that no failure is lost
// between the two formats.
package results

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"time"

	"gotest.tools/gotestsum/testjson"
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

// event is what Parse reads of each test2json event (go doc cmd/test2json)
// and build event (go help buildjson) itself: gotestsum's Execution keeps
// neither which package's build a package failed on, nor build output by
// package, nor the order packages started in.
type event struct {
	Time        time.Time
	Action      string
	Package     string
	Output      string
	ImportPath  string
	FailedBuild string
}

// stream is what Parse reads from the lines themselves.
type stream struct {
	// order lists packages in the order of their first event.
	order []string
	// builds holds build output by package path.
	builds map[string][]string
	// failedBuild is the package whose build a package failed on.
	failedBuild map[string]string
}

// Parse reads a go test -json stream. gotestsum's testjson decides each
// test's and package's result; Parse makes a case of each leaf test, of a
// parent test that failed on its own, and of each package that failed
// outside its tests. A line that is not JSON is kept in Stray; a line that
// is broken JSON is an error naming it.
func Parse(r io.Reader) (*Report, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading go test -json output: %w", err)
	}
	report := &Report{}
	st := stream{builds: map[string][]string{}, failedBuild: map[string]string{}}
	seen := map[string]bool{}
	// An older go wrote compiler errors to stderr, which callers may merge
	// into the stream: they follow a "# pkg" header.
	strayBuild := ""
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimRight(line, "\r")
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
		case !strings.HasPrefix(trimmed, "{"):
			report.Stray = append(report.Stray, line)
			if header, ok := strings.CutPrefix(trimmed, "# "); ok {
				strayBuild = packagePath(header)
			} else if strayBuild != "" {
				st.builds[strayBuild] = append(st.builds[strayBuild], line)
			}
		default:
			var e event
			if err := json.Unmarshal([]byte(trimmed), &e); err != nil {
				return nil, fmt.Errorf("go test -json output line %d: %w", n+1, err)
			}
			if report.Started.IsZero() && !e.Time.IsZero() {
				report.Started = e.Time
			}
			if e.Action == "build-output" {
				path := packagePath(e.ImportPath)
				st.builds[path] = append(st.builds[path], strings.TrimSuffix(e.Output, "\n"))
				continue
			}
			if e.Package != "" && !seen[e.Package] {
				seen[e.Package] = true
				st.order = append(st.order, e.Package)
			}
			if e.FailedBuild != "" {
				st.failedBuild[e.Package] = packagePath(e.FailedBuild)
			}
		}
	}
	exec, err := testjson.ScanTestOutput(testjson.ScanConfig{
		Stdout:                   bytes.NewReader(data),
		Handler:                  ignore{},
		IgnoreNonJSONOutputLines: true,
	})
	if err != nil {
		return nil, fmt.Errorf("reading go test -json output: %w", err)
	}
	for _, name := range st.order {
		pkg := exec.Package(name)
		if pkg == nil {
			continue
		}
		if pkg.Result() != "" {
			report.Elapsed += pkg.Elapsed().Round(time.Millisecond)
		}
		report.Cases = append(report.Cases, st.packageCases(name, pkg)...)
	}
	return report, nil
}

// ignore is a testjson.EventHandler for a scan that only builds the
// Execution.
type ignore struct{}

func (ignore) Event(testjson.TestEvent, *testjson.Execution) error { return nil }
func (ignore) Err(string) error                                    { return nil }

// neverFinished is the Elapsed testjson gives a test that had no result.
const neverFinished = -1

// packageCases are the cases of one package in the order its tests started:
// each leaf test, a parent test that failed on its own although its
// subtests passed, and the package itself when it failed with no failed
// test (it did not build, or failed before or after its tests: TestMain, a
// leak check).
func (st *stream) packageCases(name string, pkg *testjson.Package) []Case {
	passed := pkg.Result() == testjson.ActionPass
	var tests []testjson.TestCase
	for _, group := range [][]testjson.TestCase{pkg.Passed, pkg.Failed, pkg.Skipped} {
		tests = append(tests, group...)
	}
	slices.SortFunc(tests, func(a, b testjson.TestCase) int { return a.ID - b.ID })
	statuses := map[string]Status{}
	for _, t := range tests {
		statuses[t.Test.Name()] = testStatus(pkg, t, passed)
	}
	hasSubtests, failedSubtest := map[string]bool{}, map[string]bool{}
	for test, status := range statuses {
		for p := testjson.TestName(test).Parent(); p != ""; p = testjson.TestName(p).Parent() {
			hasSubtests[p] = true
			failedSubtest[p] = failedSubtest[p] || status == Failed
		}
	}
	var out []Case
	testFailed := false
	for _, t := range tests {
		test := t.Test.Name()
		status := statuses[test]
		if hasSubtests[test] && !(status == Failed && !failedSubtest[test]) {
			continue
		}
		lines := logLines(strings.Join(pkg.OutputLines(t), ""))
		c := Case{Package: name, Name: test, Status: status, Output: strings.Join(lines, "\n")}
		if t.Elapsed > 0 {
			c.Elapsed = t.Elapsed.Round(time.Millisecond)
		}
		switch {
		case status == Skipped:
			c.Message = lastEntry(lines)
		case status == Failed && t.Elapsed == neverFinished:
			c.Message = "did not finish"
			// testjson files what follows a timeout's panic under the
			// package: the first panic line is said either way.
			if l := firstPanic(append(lines, logLines(pkg.Output(0))...)); l != "" {
				c.Message += ": " + l
			}
		case status == Failed:
			c.Message = firstLine(lines)
		}
		testFailed = testFailed || status == Failed
		out = append(out, c)
	}
	if pkg.Result() == testjson.ActionFail && !testFailed {
		out = append(out, st.packageCase(name, pkg))
	}
	return out
}

// testStatus is a test's result as a case's. A test with no result ended
// with its test binary (a panic in another goroutine, a timeout, os.Exit)
// unless its package passed: go test reports no result for a benchmark
// that logged nothing.
func testStatus(pkg *testjson.Package, t testjson.TestCase, pkgPassed bool) Status {
	switch {
	case slices.ContainsFunc(pkg.Skipped, func(s testjson.TestCase) bool { return s.ID == t.ID }):
		return Skipped
	case slices.ContainsFunc(pkg.Passed, func(s testjson.TestCase) bool { return s.ID == t.ID }):
		return Passed
	case t.Elapsed == neverFinished && pkgPassed:
		return Passed
	}
	return Failed
}

// packageCase reports a package that failed with no failed test: it did
// not build, or failed before or after its tests.
func (st *stream) packageCase(name string, pkg *testjson.Package) Case {
	c := Case{Package: name, Name: name, Status: Failed, Elapsed: pkg.Elapsed().Round(time.Millisecond)}
	var own []string
	buildFailed := st.failedBuild[name] != ""
	for _, l := range logLines(pkg.Output(0)) {
		if strings.HasSuffix(l, "[build failed]") || strings.HasSuffix(l, "[setup failed]") {
			buildFailed = true
		}
		if !isGoTestSummary(l) {
			own = append(own, l)
		}
	}
	if !buildFailed {
		c.Output = strings.Join(own, "\n")
		if c.Message = firstLine(own); c.Message == "" {
			c.Message = "package failed outside its tests"
		}
		return c
	}
	failed := st.failedBuild[name]
	if failed == "" {
		failed = name
	}
	build := logLines(strings.Join(st.builds[failed], "\n"))
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

// packagePath drops the variant suffix of a package ID:
// "example.com/p [example.com/p.test]" is built for package example.com/p.
func packagePath(id string) string {
	path, _, _ := strings.Cut(strings.TrimSpace(id), " ")
	return path
}

// isGoTestSummary reports whether a package output line is one go test
// prints about every package, which says nothing about why it failed.
func isGoTestSummary(l string) bool {
	return l == "PASS" || l == "FAIL" ||
		strings.HasPrefix(l, "FAIL\t") || strings.HasPrefix(l, "ok  \t") || strings.HasPrefix(l, "?   \t")
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

// UnverifiedPrefix starts the message of a check that could not verify
// what a driver's manifest enables (no device to check it with, nothing to
// reach the node by): a failure, or a skip the caller allowed.
const UnverifiedPrefix = "not verified: "

// Unverified is the verdict on a check that could not verify what it was
// meant to: Failed, unless the caller allows unverified checks, then
// Skipped; the message says so either way.
func Unverified(allow bool, reason string) (Status, string) {
	if allow {
		return Skipped, UnverifiedPrefix + reason
	}
	return Failed, UnverifiedPrefix + reason + " (--allow-unverified makes this a warning)"
}

// KeptOffPrefix starts the message of a check the cluster kept off the
// nodes where its claims fit: a taint its pods do not tolerate, their node
// selection, a cordon. Neither the driver's failure nor a pass.
const KeptOffPrefix = "not verified, the cluster's: "

// KeptOff is the verdict on a check whose pod the cluster kept off every
// node its claims fit: skipped, its message saying so.
func KeptOff(reason string) (Status, string) {
	return Skipped, KeptOffPrefix + reason
}

// KeptOff counts the cases the cluster kept off their nodes.
func (r *Report) KeptOff() int { return r.skipped(KeptOffPrefix) }

// skipped counts the skipped cases whose message starts with prefix.
func (r *Report) skipped(prefix string) int {
	n := 0
	for _, c := range r.Cases {
		if c.Status == Skipped && strings.HasPrefix(c.Message, prefix) {
			n++
		}
	}
	return n
}

// Unverified counts the skipped cases that were allowed to go unverified.
func (r *Report) Unverified() int { return r.skipped(UnverifiedPrefix) }

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
