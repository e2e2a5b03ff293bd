package scalebench_test

import (
	"context"
	"encoding/xml"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/harness/scalebench"
)

// TestSmoke runs every case in every state on 10 virtual nodes, and the
// scheduler_perf-shaped workload on 10, so that the bench cannot rot. It
// checks what each run measured, not how fast: speed lives in
// `go run mage.go bench:scale`.
func TestSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts embedded labs: run without -short")
	}
	ctx := context.Background()
	bin, err := build.Dralab(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ran []string
	progress := func(run string) func(error) {
		ran = append(ran, run)
		return func(err error) { t.Logf("%s: %v", run, err) }
	}
	// The single-GPU cases on 10 nodes, the whole-server ones on the
	// fewest they run on: two NVLink domains of 8.
	var single []string
	for _, c := range scalebench.Cases() {
		if !slices.Contains(scalebench.WholeNodeCases(), c) {
			single = append(single, c)
		}
	}
	results, err := scalebench.Run(ctx, scalebench.Options{Nodes: []int{10}, Cases: single, Binary: bin, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scalebench.Run(ctx, scalebench.Options{Nodes: []int{10}, Cases: []string{scalebench.CaseGang}, Binary: bin}); err == nil || !strings.Contains(err.Error(), "needs at least 16") {
		t.Errorf("a gang on 10 nodes: %v, want the 16 nodes it needs", err)
	}
	gangs, err := scalebench.Run(ctx, scalebench.Options{Nodes: []int{scalebench.GangMinNodes}, Cases: scalebench.WholeNodeCases(), Binary: bin, Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	results = append(results, gangs...)
	if want := len(scalebench.Cases()) * len(scalebench.States()); len(results) != want || len(ran) != want {
		t.Fatalf("%d results of %d runs, want %d", len(results), len(ran), want)
	}
	for _, r := range results {
		whole := slices.Contains(scalebench.WholeNodeCases(), r.Workload)
		nodes := 10
		if whole {
			nodes = scalebench.GangMinNodes
		}
		if r.Case != scalebench.Name(r.Workload, r.State, nodes) || r.Nodes != nodes || r.Source != "dralab" {
			t.Errorf("%s: named %q, %d nodes, source %q", r.Case, r.Case, r.Nodes, r.Source)
		}
		wantPods := 10 * scalebench.GPUsPerNode / 2
		if r.State == scalebench.StateHalf {
			wantPods /= 2
		}
		if r.Workload == scalebench.CaseMatchAttribute {
			wantPods /= 2
		}
		if whole {
			// One group: the one NVLink domain left by the warm-up
			// or the half state's pods.
			wantPods = scalebench.GroupSize
		}
		if r.Pods != wantPods {
			t.Errorf("%s: %d measured pods, want %d", r.Case, r.Pods, wantPods)
		}
		if wantGroups := map[bool]int{true: 1}[r.Workload == scalebench.CaseGang || r.Workload == scalebench.CaseGangTopology]; r.Groups != wantGroups {
			t.Errorf("%s: %d measured groups, want %d", r.Case, r.Groups, wantGroups)
		}
		if r.PodsPerSecond <= 0 || r.CPUSecondsPerPod <= 0 || r.PeakRSSBytes < 100<<20 {
			t.Errorf("%s: %.1f pods/s, %.4f CPU s/pod, peak RSS %d bytes: want each above zero (RSS above 100 MiB, a control plane's)", r.Case, r.PodsPerSecond, r.CPUSecondsPerPod, r.PeakRSSBytes)
		}
		if r.P50.HighSeconds <= 0 || r.P50.LowSeconds >= r.P50.HighSeconds || r.P99.HighSeconds < r.P50.HighSeconds {
			t.Errorf("%s: p50 %s ms, p99 %s ms: want p50 a bucket (low, high], p99 one no lower", r.Case, r.P50, r.P99)
		}
		switch {
		case r.Groups > 0:
			if r.VsSinglePod <= 0 || r.VsCounting != 0 {
				t.Errorf("%s: ÷ single pod = %g, ÷ counting = %g: want the first only", r.Case, r.VsSinglePod, r.VsCounting)
			}
		case whole:
			if r.VsSinglePod != 0 || r.VsCounting != 0 {
				t.Errorf("%s: ÷ single pod = %g, ÷ counting = %g: want neither, it is the baseline of the gangs", r.Case, r.VsSinglePod, r.VsCounting)
			}
		case r.VsCounting <= 0 || (r.Workload == scalebench.CaseCounting && r.VsCounting != 1) || r.VsSinglePod != 0:
			t.Errorf("%s: ÷ counting = %g, ÷ single pod = %g", r.Case, r.VsCounting, r.VsSinglePod)
		}
	}

	shaped, err := scalebench.RunUpstreamShape(ctx, scalebench.Options{Binary: bin}, scalebench.UpstreamWorkload{Name: "100pods_10nodes", Nodes: 10, DevicesPerNode: 10, InitClaims: 50, MeasurePods: 50})
	if err != nil {
		t.Fatal(err)
	}
	if shaped.Case != "SchedulingWithResourceClaimTemplate/100pods_10nodes" || shaped.Pods != 50 || shaped.PodsPerSecond <= 0 {
		t.Errorf("scheduler_perf's shape on the lab: %+v", shaped)
	}

	dir := t.TempDir()
	all := append(results, shaped)
	if err := scalebench.WriteJSON(filepath.Join(dir, "bench-scale.json"), all); err != nil {
		t.Fatal(err)
	}
	back, err := scalebench.ReadJSON(filepath.Join(dir, "bench-scale.json"))
	if err != nil || len(back) != len(all) || back[3] != all[3] {
		t.Errorf("JSON round trip: %v, %d results, want %d", err, len(back), len(all))
	}
	svg := filepath.Join(dir, "bench-scale.svg")
	if err := scalebench.WritePlot(svg, all); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		XMLName xml.Name
	}
	if err := xml.Unmarshal(data, &doc); err != nil || doc.XMLName.Local != "svg" {
		t.Errorf("plot is not an SVG document: %v (root %q)", err, doc.XMLName.Local)
	}
}
