package scalebench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteTable writes the results as an aligned table: one row a run, with
// the DRA ÷ counting ratio, the gang ÷ single-pod ratio of the gang cases,
// and for upstream's runs the lab ÷ upstream
// ratio of the lab run compared with them.
func WriteTable(out io.Writer, results []Result, comparisons []Comparison) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tsource\tpods\tpods/s\t÷ counting\t÷ single pod\tp50 ms\tp99 ms\tCPU ms/pod\tpeak RSS MiB\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.Case, r.Source, r.Pods, r.PodsPerSecond,
			orDash(r.VsCounting, "%.2f"), orDash(r.VsSinglePod, "%.2f"), r.P50, r.P99, orDash(r.CPUSecondsPerPod*1000, "%.1f"), orDash(float64(r.PeakRSSBytes)/(1<<20), "%.0f"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.Note != "" {
			fmt.Fprintf(out, "%s (%s): %s\n", r.Case, r.Source, r.Note)
		}
	}
	if len(comparisons) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	// No ratio: the two schedulers run with different settings, which
	// each column names.
	fmt.Fprintln(tw, "workload\tdralab pods/s\tscheduler_perf pods/s\t")
	for _, c := range comparisons {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t\n", c.Workload, c.Lab, c.Upstream)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(comparisons) > 0 {
		fmt.Fprintf(out, "dralab: %s; scheduler_perf: %s. The settings differ, so the figures are not a ratio of the schedulers' speed.\n", comparisons[0].LabSettings, comparisons[0].UpstreamSettings)
	}
	return nil
}

func orDash(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// Comparison is the same workload measured by the bench on the lab and by
// scheduler_perf on its own test control plane, in one run.
type Comparison struct {
	Workload string  `json:"workload"`
	Lab      float64 `json:"dralabPodsPerSecond"`
	Upstream float64 `json:"upstreamPodsPerSecond"`
	// LabSettings and UpstreamSettings are the schedulers' settings that
	// differ between the two runs.
	LabSettings      string `json:"dralabSettings"`
	UpstreamSettings string `json:"upstreamSettings"`
}

// WriteJSON writes the results as a JSON array, one object a run.
func WriteJSON(path string, results []Result) error {
	data, err := json.MarshalIndent(results, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadJSON reads what WriteJSON wrote.
func ReadJSON(path string) ([]Result, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var results []Result
	if err := json.Unmarshal(data, &results); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return results, nil
}

// WritePlot draws the lab's throughput as grouped bars, one group per
// state and size, one bar per case (counting, the baseline, first), and
// writes it as SVG.
func WritePlot(path string, results []Result) error {
	var groups []string
	var cases []string
	runs := map[string]map[string][]float64{}
	for _, r := range results {
		if r.Source != sourceLab {
			continue
		}
		g := fmt.Sprintf("%s, %d nodes", r.State, r.Nodes)
		if !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
		if !slices.Contains(cases, r.Workload) {
			cases = append(cases, r.Workload)
		}
		if runs[r.Workload] == nil {
			runs[r.Workload] = map[string][]float64{}
		}
		runs[r.Workload][g] = append(runs[r.Workload][g], r.PodsPerSecond)
	}
	// Repeated runs are drawn as their median.
	values := map[string]map[string]float64{}
	for c, byGroup := range runs {
		values[c] = map[string]float64{}
		for g, v := range byGroup {
			values[c][g] = spreadOf(v).Median
		}
	}
	if len(groups) == 0 {
		return fmt.Errorf("writing %s: no lab results to plot", path)
	}
	p := plot.New()
	p.Title.Text = "Scheduling throughput, counting vs claims"
	p.Y.Label.Text = "pods/s"
	p.Y.Min = 0
	// Room above the tallest bar for the legend.
	top := 0.0
	for _, byGroup := range values {
		for _, v := range byGroup {
			top = math.Max(top, v)
		}
	}
	p.Y.Max = top * (1.15 + 0.07*float64(len(cases)))
	width := vg.Points(12)
	for i, c := range cases {
		vals := make(plotter.Values, len(groups))
		for j, g := range groups {
			vals[j] = values[c][g]
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("plotting %s: %w", c, err)
		}
		bars.LineStyle.Width = 0
		bars.Color = plotutil.Color(i)
		bars.Offset = width * vg.Length(float64(i)-float64(len(cases)-1)/2)
		p.Add(bars)
		p.Legend.Add(c, bars)
	}
	p.Legend.Top = true
	p.NominalX(groups...)
	// Half a group of margin on each side, so that no bar or label
	// touches the picture's edge.
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	// Each group is as wide as its bars and a gap.
	w := max(6*vg.Inch, vg.Length(len(groups))*(width*vg.Length(len(cases))+36)+72)
	return p.Save(w, 4*vg.Inch, path)
}

// ParseNodes reads a comma-separated list of sizes, as DRALAB_BENCH_NODES
// gives them.
func ParseNodes(s string) ([]int, error) {
	var nodes []int
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(f, "%d", &n); err != nil || fmt.Sprint(n) != f || n < 3 {
			return nil, fmt.Errorf("DRALAB_BENCH_NODES=%q: %q is not a node count of at least 3", s, f)
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}
