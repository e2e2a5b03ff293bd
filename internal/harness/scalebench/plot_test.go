package scalebench_test

import (
	"math"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/dralab/dralab/internal/dashboard/browsertest"
	"github.com/dralab/dralab/internal/harness/scalebench"
)

// TestPlotInABrowser opens the plot in Chromium and reads what it draws:
// one bar per case and group, each as tall as its throughput says, the
// cases named in the legend and the groups on the axis.
func TestPlotInABrowser(t *testing.T) {
	b := browsertest.New(t)
	values := map[string][2]float64{
		scalebench.CaseCounting:       {300, 320},
		scalebench.CaseClaim:          {60, 75},
		scalebench.CaseFirstAvailable: {30, 45},
	}
	cases := []string{scalebench.CaseCounting, scalebench.CaseClaim, scalebench.CaseFirstAvailable}
	var results []scalebench.Result
	for i, state := range []string{scalebench.StateEmpty, scalebench.StateHalf} {
		for _, c := range cases {
			results = append(results, scalebench.Result{Case: scalebench.Name(c, state, 100), Workload: c, State: state, Nodes: 100, PodsPerSecond: values[c][i], Source: "dralab"})
		}
	}
	// Upstream's runs are in the table, not in the plot.
	results = append(results, scalebench.Result{Case: "SchedulingWithResourceClaimTemplate/5000pods_500nodes", Workload: "SchedulingWithResourceClaimTemplate", State: scalebench.StateHalf, Nodes: 500, PodsPerSecond: 500, Source: "scheduler_perf"})
	dir := t.TempDir()
	svg := filepath.Join(dir, "bench-scale.svg")
	if err := scalebench.WritePlot(svg, results); err != nil {
		t.Fatal(err)
	}

	type box struct {
		Fill, Text, Tag                  string
		Top, Bottom, Left, Width, Height float64
	}
	if _, err := chromedp.Run(b.Ctx, chromedp.Navigate("file://"+svg)); err != nil {
		t.Fatal(err)
	}
	shapes, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]box](`[...document.querySelectorAll("path, text")].map(e => {
		const r = e.getBoundingClientRect();
		return {Fill: getComputedStyle(e).fill, Top: r.top, Bottom: r.bottom, Left: r.left, Width: r.width, Height: r.height, Text: e.tagName == "text" ? e.textContent : "", Tag: e.tagName};
	})`))
	if err != nil {
		t.Fatal(err)
	}
	size, err := chromedp.Run(b.Ctx, chromedp.Evaluate[[]float64](`(r => [r.width, r.height])(document.documentElement.getBoundingClientRect())`))
	if err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(b.Ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		if err := os.WriteFile(filepath.Join(dir, "bench-scale-plot.png"), png, 0o644); err != nil {
			t.Error(err)
		}
	}
	texts := map[string]bool{}
	var labels []box
	byFill := map[string][]box{}
	for _, s := range shapes {
		// The browser's fallback font may run a few pixels wider than the
		// metrics gonum laid the text out with.
		const slack = 4
		if s.Left < -slack || s.Top < -slack || s.Left+s.Width > size[0]+slack || s.Bottom > size[1]+slack {
			t.Errorf("%s %q at (%.0f, %.0f)–(%.0f, %.0f) is cut off by the %.0f×%.0f picture", s.Tag, s.Text, s.Left, s.Top, s.Left+s.Width, s.Bottom, size[0], size[1])
		}
		if s.Tag == "text" {
			texts[s.Text] = true
			labels = append(labels, s)
			continue
		}
		if s.Fill != "none" && s.Fill != "rgb(255, 255, 255)" && s.Fill != "rgb(0, 0, 0)" && s.Height > 0 {
			byFill[s.Fill] = append(byFill[s.Fill], s)
		}
	}
	for _, want := range append(cases, "empty, 100 nodes", "half, 100 nodes", "pods/s") {
		if !texts[want] {
			t.Errorf("the plot shows no text %q (texts: %v)", want, texts)
		}
	}
	if texts["SchedulingWithResourceClaimTemplate"] {
		t.Error("the plot shows upstream's run")
	}
	if len(byFill) != len(cases) {
		t.Fatalf("%d bar colours, want one per case (%d): %v", len(byFill), len(cases), byFill)
	}
	// Bars stand on the x axis; the legend's swatches do not.
	floor := 0.0
	for _, boxes := range byFill {
		for _, s := range boxes {
			floor = math.Max(floor, s.Bottom)
		}
	}
	var drawn []float64
	for _, boxes := range byFill {
		var bars []box
		for _, s := range boxes {
			if math.Abs(s.Bottom-floor) < 1 {
				bars = append(bars, s)
			}
		}
		if len(bars) != 2 {
			t.Fatalf("%d bars of colour %s on the axis, want one per group (2)", len(bars), boxes[0].Fill)
		}
		for _, bar := range bars {
			drawn = append(drawn, bar.Height)
			for _, l := range labels {
				if l.Left < bar.Left+bar.Width && bar.Left < l.Left+l.Width && l.Top < bar.Bottom && bar.Top < l.Bottom {
					t.Errorf("text %q overlaps a bar of colour %s", l.Text, bar.Fill)
				}
			}
		}
	}
	// Each bar's height is its value on one scale: pods/s per pixel is
	// the same for every bar.
	sort.Float64s(drawn)
	var want []float64
	for _, v := range values {
		want = append(want, v[0], v[1])
	}
	sort.Float64s(want)
	scale := drawn[len(drawn)-1] / want[len(want)-1]
	for i := range want {
		if math.Abs(drawn[i]-want[i]*scale) > 1.5 {
			t.Errorf("bar %d is %.1f px tall, want %.1f (%g pods/s at %.3f px per pod/s)", i, drawn[i], want[i]*scale, want[i], scale)
		}
	}
	if p := b.Problems(); len(p) > 0 {
		t.Errorf("browser problems: %v", p)
	}
}
