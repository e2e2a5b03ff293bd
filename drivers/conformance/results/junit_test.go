package results

import (
	"bytes"
	"encoding/xml"
	"os"
	"strings"
	"testing"
	"time"
)

func parseFile(t *testing.T, name string) *Report {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func parseString(t *testing.T, stream string) *Report {
	t.Helper()
	r, err := Parse(strings.NewReader(stream))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// brief is what a test asserts about a case; Output is checked for
// containing outputHas.
type brief struct {
	pkg, name string
	status    Status
	elapsed   time.Duration
	message   string
	outputHas string
}

func checkCases(t *testing.T, r *Report, want []brief) {
	t.Helper()
	if len(r.Cases) != len(want) {
		var names []string
		for _, c := range r.Cases {
			names = append(names, c.Name)
		}
		t.Fatalf("%d cases %q, want %d", len(r.Cases), names, len(want))
	}
	for i, w := range want {
		c := r.Cases[i]
		if c.Package != w.pkg || c.Name != w.name || c.Status != w.status || c.Elapsed != w.elapsed || c.Message != w.message {
			t.Errorf("case %d = {%s %s %s %v %q}, want {%s %s %s %v %q}", i, c.Package, c.Name, c.Status, c.Elapsed, c.Message, w.pkg, w.name, w.status, w.elapsed, w.message)
		}
		if !strings.Contains(c.Output, w.outputHas) {
			t.Errorf("case %s output %q lacks %q", c.Name, c.Output, w.outputHas)
		}
		if strings.Contains(c.Output, "=== ") || strings.Contains(c.Output, "--- ") {
			t.Errorf("case %s output keeps framing lines: %q", c.Name, c.Output)
		}
	}
}

const conformance = "example.com/drv/conformance"

func TestParseSubtestsSkipsAndOwnFailures(t *testing.T) {
	r := parseFile(t, "testdata/conformance.json")
	checkCases(t, r, []brief{
		{conformance, "TestSanity/Prepare", Passed, 120 * time.Millisecond, "", "prepared claim default/gpu-claim"},
		// The line came in two output events, as test2json splits long lines.
		{conformance, "TestSanity/Unprepare", Failed, 230 * time.Millisecond, "unprepare left the CDI spec behind:",
			"sanity_test.go:40: unprepare left the CDI spec behind:\n    /var/run/cdi/gpu.dralab.dev-claim-1.json"},
		{conformance, "TestSanity/Restart", Skipped, 0, "driver.yaml: sanity.restartable is false", ""},
		{conformance, "TestPrioritizedList", Skipped, 0, "DRAPrioritizedList is not enabled in driver.yaml:\ncapabilities.DRAPrioritizedList is false", ""},
		// testjson keeps no output of a passed top-level test.
		{conformance, "TestAdminAccess", Passed, 1500 * time.Millisecond, "", ""},
		// Its subtest passed; the parent's own error must not be lost.
		{conformance, "TestCleanup", Failed, 400 * time.Millisecond, "2 ResourceClaims left in namespace conformance-1", ""},
		{conformance, "TestCleanup/Claims", Passed, 100 * time.Millisecond, "", "deleted 2 claims"},
	})
	if !r.Failed() {
		t.Error("Failed() = false")
	}
	if r.Elapsed != 2300*time.Millisecond {
		t.Errorf("Elapsed = %v, want 2.3s", r.Elapsed)
	}
	if want := time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC); !r.Started.Equal(want) {
		t.Errorf("Started = %v, want %v", r.Started, want)
	}
}

func TestParseBuildFailure(t *testing.T) {
	r := parseFile(t, "testdata/build-failure.json")
	checkCases(t, r, []brief{
		{"example.com/drv/kit", "example.com/drv/kit", Failed, 0, "build failed: kit/driver_test.go:12:2: undefined: newFakeKubelet", "kit/driver_test.go:30:9: too many errors"},
		{"example.com/drv/manifest", "TestParse", Passed, 0, "", ""},
	})
	if !r.Failed() {
		t.Error("Failed() = false")
	}
}

func TestParseUnfinishedTests(t *testing.T) {
	r := parseFile(t, "testdata/timeout.json")
	checkCases(t, r, []brief{
		{"example.com/drv/e2e", "TestPodRunning/h100", Failed, 0, "did not finish: panic: test timed out after 10m0s", "waiting for pod gpu-0 to run"},
		// No result event, but its package passed.
		{"example.com/drv/kit", "BenchmarkPrepare", Passed, 0, "", ""},
	})
	if r.Elapsed != 601416*time.Millisecond {
		t.Errorf("Elapsed = %v, want 601.416s", r.Elapsed)
	}
}

func TestParseOlderGoBuildFailureOnMergedStderr(t *testing.T) {
	r := parseString(t, `# example.com/drv/kit [example.com/drv/kit.test]
kit/driver_test.go:12:2: undefined: newFakeKubelet
{"Action":"start","Package":"example.com/drv/kit"}
{"Action":"output","Package":"example.com/drv/kit","Output":"FAIL\texample.com/drv/kit [build failed]\n"}
{"Action":"fail","Package":"example.com/drv/kit","Elapsed":0}
`)
	checkCases(t, r, []brief{
		{"example.com/drv/kit", "example.com/drv/kit", Failed, 0, "build failed: kit/driver_test.go:12:2: undefined: newFakeKubelet", "undefined: newFakeKubelet"},
	})
	if len(r.Stray) != 2 {
		t.Errorf("Stray = %q, want the 2 compiler lines", r.Stray)
	}
}

func TestParsePackageFailureOutsideTests(t *testing.T) {
	r := parseString(t, `{"Action":"start","Package":"example.com/drv/kit"}
{"Action":"run","Package":"example.com/drv/kit","Test":"TestPrepare"}
{"Action":"output","Package":"example.com/drv/kit","Test":"TestPrepare","Output":"--- PASS: TestPrepare (0.01s)\n"}
{"Action":"pass","Package":"example.com/drv/kit","Test":"TestPrepare","Elapsed":0.01}
{"Action":"output","Package":"example.com/drv/kit","Output":"PASS\n"}
{"Action":"output","Package":"example.com/drv/kit","Output":"goleak: found unexpected goroutines:\n"}
{"Action":"output","Package":"example.com/drv/kit","Output":"  [Goroutine 12 in state select]\n"}
{"Action":"output","Package":"example.com/drv/kit","Output":"FAIL\texample.com/drv/kit\t0.200s\n"}
{"Action":"fail","Package":"example.com/drv/kit","Elapsed":0.2}
`)
	checkCases(t, r, []brief{
		{"example.com/drv/kit", "TestPrepare", Passed, 10 * time.Millisecond, "", ""},
		{"example.com/drv/kit", "example.com/drv/kit", Failed, 200 * time.Millisecond, "goleak: found unexpected goroutines:", "[Goroutine 12 in state select]"},
	})
}

func TestParseTruncatedStream(t *testing.T) {
	// The stream ends mid-test, e.g. go test was killed: not a pass.
	r := parseString(t, `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestSlow"}
{"Action":"output","Package":"p","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}`)
	checkCases(t, r, []brief{{"p", "TestSlow", Failed, 0, "did not finish", ""}})
}

func TestSkipReasonAfterPrintedOutput(t *testing.T) {
	// fmt.Println output sits at the left margin, t.Log output below it.
	r := parseString(t, `{"Action":"run","Package":"p","Test":"TestGPU"}
{"Action":"output","Package":"p","Test":"TestGPU","Output":"probing /dev/nvidia0\n"}
{"Action":"output","Package":"p","Test":"TestGPU","Output":"    gpu_test.go:9: no GPU on this machine\n"}
{"Action":"output","Package":"p","Test":"TestGPU","Output":"--- SKIP: TestGPU (0.00s)\n"}
{"Action":"skip","Package":"p","Test":"TestGPU","Elapsed":0}
{"Action":"pass","Package":"p","Elapsed":0.1}
`)
	checkCases(t, r, []brief{{"p", "TestGPU", Skipped, 0, "no GPU on this machine", "probing /dev/nvidia0"}})
}

func TestParseErrors(t *testing.T) {
	_, err := Parse(strings.NewReader("{\"Action\":\"start\",\"Package\":\"p\"}\n{\"Action\":\n"))
	if err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("Parse of broken JSON = %v, want an error naming line 2", err)
	}
	r, err := Parse(strings.NewReader(""))
	if err != nil || len(r.Cases) != 0 || r.Failed() {
		t.Errorf("Parse of nothing = %+v, %v; want an empty report", r, err)
	}
}

// The JUnit schema, read back independently of the writer's types.
type junitSuites struct {
	Tests    int `xml:"tests,attr"`
	Failures int `xml:"failures,attr"`
	Skipped  int `xml:"skipped,attr"`
	Suites   []struct {
		Name      string `xml:"name,attr"`
		Tests     int    `xml:"tests,attr"`
		Failures  int    `xml:"failures,attr"`
		Skipped   int    `xml:"skipped,attr"`
		Time      string `xml:"time,attr"`
		Timestamp string `xml:"timestamp,attr"`
		Cases     []struct {
			Classname string `xml:"classname,attr"`
			Name      string `xml:"name,attr"`
			Time      string `xml:"time,attr"`
			Failure   *struct {
				Message string `xml:"message,attr"`
				Text    string `xml:",chardata"`
			} `xml:"failure"`
			Skipped *struct {
				Message string `xml:"message,attr"`
			} `xml:"skipped"`
		} `xml:"testcase"`
	} `xml:"testsuite"`
}

func writeAndRead(t *testing.T, r *Report, suite string) junitSuites {
	t.Helper()
	var buf bytes.Buffer
	if err := r.WriteXML(&buf, suite); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(buf.String(), "<?xml") {
		t.Errorf("no XML header:\n%s", buf.String())
	}
	var doc junitSuites
	if err := xml.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("the XML does not parse back: %v\n%s", err, buf.String())
	}
	return doc
}

func TestWriteXML(t *testing.T) {
	doc := writeAndRead(t, parseFile(t, "testdata/conformance.json"), "dra-conformance")
	if doc.Tests != 7 || doc.Failures != 2 || doc.Skipped != 2 {
		t.Errorf("testsuites tests/failures/skipped = %d/%d/%d, want 7/2/2", doc.Tests, doc.Failures, doc.Skipped)
	}
	if len(doc.Suites) != 1 {
		t.Fatalf("%d suites, want 1", len(doc.Suites))
	}
	s := doc.Suites[0]
	if s.Name != "dra-conformance" || s.Tests != 7 || s.Failures != 2 || s.Skipped != 2 || s.Time != "2.300" || s.Timestamp != "2025-06-01T10:00:00Z" {
		t.Errorf("testsuite = %s tests=%d failures=%d skipped=%d time=%s timestamp=%s", s.Name, s.Tests, s.Failures, s.Skipped, s.Time, s.Timestamp)
	}
	var names []string
	for _, c := range s.Cases {
		names = append(names, c.Name)
		if c.Classname != conformance {
			t.Errorf("%s classname = %q, want %q", c.Name, c.Classname, conformance)
		}
		switch c.Name {
		case "TestSanity/Unprepare":
			if c.Time != "0.230" {
				t.Errorf("%s time = %s, want 0.230", c.Name, c.Time)
			}
			if c.Failure == nil || c.Failure.Message != "unprepare left the CDI spec behind:" || !strings.Contains(c.Failure.Text, "/var/run/cdi/gpu.dralab.dev-claim-1.json") {
				t.Errorf("%s failure = %+v", c.Name, c.Failure)
			}
		case "TestSanity/Restart":
			if c.Skipped == nil || c.Skipped.Message != "driver.yaml: sanity.restartable is false" {
				t.Errorf("%s skipped = %+v", c.Name, c.Skipped)
			}
		case "TestPrioritizedList":
			// A multi-line reason keeps its lines in the attribute.
			if c.Skipped == nil || c.Skipped.Message != "DRAPrioritizedList is not enabled in driver.yaml:\ncapabilities.DRAPrioritizedList is false" {
				t.Errorf("%s skipped = %+v", c.Name, c.Skipped)
			}
		case "TestSanity/Prepare", "TestAdminAccess", "TestCleanup/Claims":
			if c.Failure != nil || c.Skipped != nil {
				t.Errorf("passing %s has failure %+v, skipped %+v", c.Name, c.Failure, c.Skipped)
			}
		}
	}
	want := "TestSanity/Prepare TestSanity/Unprepare TestSanity/Restart TestPrioritizedList TestAdminAccess TestCleanup TestCleanup/Claims"
	if got := strings.Join(names, " "); got != want {
		t.Errorf("cases = %s\nwant %s", got, want)
	}
}

func TestWriteXMLSurvivesAnyOutput(t *testing.T) {
	// Coloured output and NUL bytes are not allowed in XML 1.0.
	r := &Report{Cases: []Case{{
		Package: "p", Name: `Test<"&">`, Status: Failed,
		Message: "\x1b[31mred\x1b[0m", Output: "\x1b[31mred\x1b[0m\x00 <tag> & ]]>",
	}}}
	doc := writeAndRead(t, r, "s")
	c := doc.Suites[0].Cases[0]
	if c.Name != `Test<"&">` || c.Failure == nil || !strings.Contains(c.Failure.Text, "<tag> & ]]>") || !strings.Contains(c.Failure.Message, "red") {
		t.Errorf("case read back = %+v, failure %+v", c, c.Failure)
	}
}

func TestSummary(t *testing.T) {
	cases := []struct {
		name, file, want string
	}{
		{"one package", "testdata/conformance.json", `CHECK                 RESULT  DETAIL
TestSanity/Prepare    PASS
TestSanity/Unprepare  FAIL    unprepare left the CDI spec behind:
TestSanity/Restart    SKIP    driver.yaml: sanity.restartable is false
TestPrioritizedList   SKIP    DRAPrioritizedList is not enabled in driver.yaml:
TestAdminAccess       PASS
TestCleanup           FAIL    2 ResourceClaims left in namespace conformance-1
TestCleanup/Claims    PASS
7 checks: 3 passed, 2 failed, 2 skipped
`},
		{"several packages", "testdata/build-failure.json", `CHECK                               RESULT  DETAIL
example.com/drv/kit                 FAIL    build failed: kit/driver_test.go:12:2: undefined: newFakeKubelet
example.com/drv/manifest.TestParse  PASS
2 checks: 1 passed, 1 failed, 0 skipped
`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := parseFile(t, c.file).Summary(); got != c.want {
				t.Errorf("Summary =\n%s\nwant\n%s", got, c.want)
			}
		})
	}
}

// Echo shows the test output of an event stream, split across writes
// anywhere, and passes other lines through.
func TestEcho(t *testing.T) {
	stream := `{"Action":"start","Package":"p"}
{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: hello\n"}
not an event
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.1s\n"}
`
	var out bytes.Buffer
	w := Echo(&out)
	for i := 0; i < len(stream); i += 7 {
		if _, err := w.Write([]byte(stream[i:min(i+7, len(stream))])); err != nil {
			t.Fatal(err)
		}
	}
	want := "=== RUN   TestA\n    a_test.go:3: hello\nnot an event\nok  \tp\t0.1s\n"
	if out.String() != want {
		t.Errorf("echoed %q, want %q", out.String(), want)
	}
}

// TestParseRecordedGoTestRuns reads what go test -json printed for the
// packages of testdata/fixture (see its README).
func TestParseRecordedGoTestRuns(t *testing.T) {
	const fx = "example.com/fx/"
	long := "unprepare left the CDI spec behind " + strings.Repeat("x", 5000) + ":"
	checkCases(t, parseFile(t, "testdata/recorded-a.json"), []brief{
		{fx + "a", "TestSanity/Prepare", Passed, 0, "", "prepared claim default/gpu-claim"},
		{fx + "a", "TestSanity/Unprepare", Failed, 0, long, "/var/run/cdi/claim-1.json"},
		{fx + "a", "TestSanity/Restart", Skipped, 0, "driver.yaml: sanity.restartable is false", ""},
		{fx + "a", "TestGPU", Skipped, 0, "no GPU on this machine", "probing /dev/nvidia0"},
		{fx + "a", "TestCleanup", Failed, 0, "2 ResourceClaims left in namespace conformance-1", ""},
		{fx + "a", "TestCleanup/Claims", Passed, 0, "", "deleted 2 claims"},
	})
	r := parseFile(t, "testdata/recorded-all.json")
	const undefined = "build failed: c/c_test.go:5:33: undefined: undefinedThing"
	checkCases(t, r, []brief{
		{fx + "a", fx + "a", Failed, 0, undefined, "undefined: undefinedThing"},
		{fx + "b", "TestPrepare", Passed, 0, "", ""},
		{fx + "b", fx + "b", Failed, 69 * time.Millisecond, "goleak: found unexpected goroutines:", ""},
		{fx + "c", fx + "c", Failed, 0, undefined, ""},
		{fx + "d", "TestPodRunning/h100", Failed, 0, "did not finish: panic: test timed out after 3s", "waiting for pod gpu-0 to run"},
	})
	if r.Started.IsZero() || r.Elapsed < 3*time.Second {
		t.Errorf("Started %v, Elapsed %v: want the first event's time and the packages' 3 s and more", r.Started, r.Elapsed)
	}
}

func TestFailureTails(t *testing.T) {
	r := parseFile(t, "testdata/conformance.json")
	want := "--- FAIL: TestSanity/Unprepare (example.com/drv/conformance, 230ms)\n" +
		"    sanity_test.go:40: unprepare left the CDI spec behind:\n" +
		"        /var/run/cdi/gpu.dralab.dev-claim-1.json\n" +
		"--- FAIL: TestCleanup (example.com/drv/conformance, 400ms)\n" +
		"    cleanup_test.go:15: 2 ResourceClaims left in namespace conformance-1\n" +
		"    cleanup_test.go:12: deleted 2 claims\n"
	if got := r.FailureTails(40); got != want {
		t.Errorf("FailureTails(40) =\n%s\nwant\n%s", got, want)
	}
	// Cut to its last line, a test's output says how much was left out.
	if got := r.FailureTails(1); !strings.Contains(got, "    [1 line before]\n        /var/run/cdi/gpu.dralab.dev-claim-1.json\n--- FAIL: TestCleanup") {
		t.Errorf("FailureTails(1) =\n%s", got)
	}
	passed := parseString(t, `{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"    a_test.go:3: fine\n"}
{"Action":"pass","Package":"p","Test":"TestA","Elapsed":0.1}
{"Action":"pass","Package":"p","Elapsed":0.2}
`)
	if got := passed.FailureTails(40); got != "" {
		t.Errorf("FailureTails of a run that passed = %q, want none", got)
	}
}
