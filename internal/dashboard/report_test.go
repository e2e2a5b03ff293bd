package dashboard_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"golang.org/x/net/html"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/dashboard/browsertest"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/scenarios"
)

// scenarioReport is a report of the prioritized-fallback scenario whose two
// steps saw the fake cluster: one expectation of each step holds, one not.
func scenarioReport(t *testing.T) *dashboard.Report {
	t.Helper()
	ctx := context.Background()
	s, err := scenarios.Get("prioritized-fallback")
	if err != nil {
		t.Fatal(err)
	}
	snap, err := allocation.Read(ctx, fake.NewClientset(cluster()...), metav1.NamespaceAll, nodedrivers.Vocabulary)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := snap.Rows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	expect := []scenarios.Expectation{
		{Pods: "train-*", Phase: "Running", Tier: "h100"},
		{Pods: "late-*", Phase: "Running"},
	}
	res := &scenarios.Result{Scenario: s.Name, Duration: 3 * time.Second}
	for _, name := range []string{"first", "second"} {
		each := scenarios.CheckEach(expect, scenarios.Outcomes(rows), scenarios.Inventory{})
		res.Steps = append(res.Steps, scenarios.StepResult{Name: name, Rows: rows, Snapshot: snap, Expectations: each})
	}
	r, err := dashboard.ScenarioReport(ctx, s, res, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A scenario's report stands alone: no script, no stylesheet or image to
// fetch, no link out; it has a section per step with the expected-vs-actual
// table (held and not held) and the picture of every device.
func TestScenarioReport(t *testing.T) {
	var b bytes.Buffer
	if err := dashboard.WriteReport(&b, scenarioReport(t)); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	var walk func(n *html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode {
			switch n.Data {
			case "script", "link", "img", "iframe", "object", "embed":
				t.Errorf("the report has a <%s>: it must stand alone", n.Data)
			}
			for _, a := range n.Attr {
				if a.Key == "src" || (a.Key == "href" && !strings.HasPrefix(a.Val, "#")) {
					t.Errorf("<%s %s=%q> points outside the report", n.Data, a.Key, a.Val)
				}
				if a.Key == "class" {
					for _, c := range strings.Fields(a.Val) {
						counts[c]++
					}
				}
				if a.Key == "data-held" {
					counts["held="+a.Val]++
				}
			}
		}
		if n.Type == html.ElementNode && n.Data == "style" && n.FirstChild != nil && strings.Contains(n.FirstChild.Data, "url(") {
			t.Errorf("the report's style fetches a url()")
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(doc)
	want := map[string]int{"step": 2, "expectation": 4, "held=true": 2, "held=false": 2, "device": 8, "allocations": 2}
	for k, v := range want {
		if counts[k] != v {
			t.Errorf("%d of %q in the report, want %d", counts[k], k, v)
		}
	}
	for _, s := range []string{"Scenario prioritized-fallback", "every pod train-*: phase Running, tier h100", "every pod late-*: phase Running", "pod late-0: phase: expected Running", "Failed.", "3s"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("the report lacks %q", s)
		}
	}
}

// The report opened from disk in a real browser: it renders every step's
// tiles and tables, requests nothing but itself and logs no error. A
// screenshot goes to $ARTIFACTS.
func TestScenarioReportInABrowser(t *testing.T) {
	b := browsertest.New(t)
	path := filepath.Join(t.TempDir(), "report.html")
	if err := dashboard.WriteReportFile(path, scenarioReport(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.Ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate("file://"+path), chromedp.WaitVisible(`section.step li.device`)); err != nil {
		t.Fatal(err)
	}
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[document.querySelectorAll("section.step").length, document.querySelectorAll("section.step li.device").length, document.querySelectorAll("tr.expectation.not-held").length, document.getElementById("verdict").dataset.passed].join(" ")`))
	if err != nil {
		t.Fatal(err)
	}
	if got != "2 8 2 false" {
		t.Errorf("steps, tiles, failed expectations, passed: %q, want \"2 8 2 false\"", got)
	}
	if r := b.Requests(); len(r) != 1 || r[0] != "file://"+path {
		t.Errorf("the page requested %q, want itself only", r)
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("the page's console: %v", p)
	}
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "scenario-report.png"), shot, 0o644); err != nil {
			t.Error(err)
		}
	}
}
