package results

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A test run's page: a row per case with its result, a failed case's
// output, a link to a case's own page, and the verdict with its counts.
func TestWriteHTML(t *testing.T) {
	rep := &Report{Elapsed: 3 * time.Second, Cases: []Case{
		{Name: "TestScenarios/claims", Status: Passed, Elapsed: 2 * time.Second, Output: "quiet"},
		{Name: "TestScenarios/counting", Status: Failed, Message: "expected 4 pods", Output: "worker-3 is <Pending>"},
		{Name: "TestKind", Status: Skipped, Message: "no Docker on this machine"},
	}}
	var b bytes.Buffer
	if err := rep.WriteHTML(&b, "e2e", map[string]string{"TestScenarios/claims": "scenario-claims.html"}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, s := range []string{
		"<title>e2e</title>",
		`data-case="TestScenarios/claims" data-status="PASS"`,
		`<a href="scenario-claims.html">TestScenarios/claims</a>`,
		`data-case="TestScenarios/counting" data-status="FAIL"`, "worker-3 is &lt;Pending&gt;",
		`data-case="TestKind" data-status="SKIP"`, "no Docker on this machine",
		`data-passed="false"`, "Failed: 3 checks, 1 passed, 1 failed, 1 skipped.", "the run took 3s",
	} {
		if !strings.Contains(page, s) {
			t.Errorf("the page lacks %s", s)
		}
	}
	if strings.Contains(page, "quiet") || strings.Contains(page, "<script") || strings.Contains(page, "http") {
		t.Errorf("the page shows a passed case's output, or has a script or an outside link:\n%s", page)
	}
	path := filepath.Join(t.TempDir(), "reports", "e2e.html")
	if err := rep.WriteHTMLFile(path, "e2e", nil); err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(path); err != nil || !strings.Contains(string(data), `data-passed="false"`) {
		t.Errorf("%s: %v", path, err)
	}
}
