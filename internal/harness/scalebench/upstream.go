package scalebench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/dralab/dralab/lab/config"
)

// UpstreamPackage is scheduler_perf's DRA package in the k8s.io/kubernetes
// module the lab is built from.
const UpstreamPackage = "k8s.io/kubernetes/test/integration/scheduler_perf/dra"

// etcdModule is the etcd server's main package, of the version the lab
// embeds: scheduler_perf's test control plane runs etcd as a binary found
// on PATH.
const etcdModule = "go.etcd.io/etcd/server/v3"

// UpstreamWorkload is one of scheduler_perf's SchedulingWithResourceClaimTemplate
// workloads, and the lab run of the same shape.
type UpstreamWorkload struct {
	// Name is scheduler_perf's, e.g. 5000pods_500nodes.
	Name string
	// Nodes, DevicesPerNode, InitClaims and MeasurePods are its
	// parameters (performance-config.yaml).
	Nodes, DevicesPerNode, InitClaims, MeasurePods int
}

// UpstreamWorkloads are the SchedulingWithResourceClaimTemplate workloads
// the bench runs beside the lab: in 1.37 the smaller one has 200 nodes
// (there is no 2000pods_100nodes).
var UpstreamWorkloads = []UpstreamWorkload{
	{Name: "2000pods_200nodes", Nodes: 200, DevicesPerNode: 10, InitClaims: 1000, MeasurePods: 1000},
	{Name: "5000pods_500nodes", Nodes: 500, DevicesPerNode: 10, InitClaims: 2500, MeasurePods: 2500},
}

// UpstreamOptions say how to run scheduler_perf.
type UpstreamOptions struct {
	// ModuleDir is this module's directory: go test runs there, so that
	// scheduler_perf is built from the same k8s.io/kubernetes.
	ModuleDir string
	// WorkDir holds the etcd binary and the data items (default a
	// temporary directory, removed at the end).
	WorkDir string
	// Output receives go test's output.
	Output io.Writer
	// LogDir keeps scheduler_perf's per-workload logs of failed
	// workloads (its $ARTIFACTS; default under WorkDir).
	LogDir string
}

// RunUpstream builds etcd, runs scheduler_perf's workloads with go test and
// returns one result per workload. Its throughput is the measured pods over
// scheduler_perf's SchedulingDuration, the bench's own definition; its
// latencies are the same scheduler histogram the bench reads.
func RunUpstream(ctx context.Context, o UpstreamOptions, workloads []UpstreamWorkload) ([]Result, error) {
	cleanup, err := orTempDir(&o.WorkDir, "dralab-scheduler-perf-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	if o.Output == nil {
		o.Output = io.Discard
	}
	bin := filepath.Join(o.WorkDir, "bin")
	data := filepath.Join(o.WorkDir, "data")
	if o.LogDir == "" {
		o.LogDir = filepath.Join(o.WorkDir, "logs")
	}
	for _, d := range []string{bin, data, o.LogDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(bin, "etcd"), etcdModule)
	build.Dir = o.ModuleDir
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building etcd for scheduler_perf: %s: %w\n%s", strings.Join(build.Args, " "), err, out)
	}
	var names []string
	for _, w := range workloads {
		names = append(names, w.Name)
	}
	test := exec.CommandContext(ctx, "go", "test", "-timeout=90m", "-run=^$", "-benchtime=1x",
		"-bench=^BenchmarkPerfScheduling$/^SchedulingWithResourceClaimTemplate$/^("+strings.Join(names, "|")+")$",
		UpstreamPackage, "-args", "-perf-scheduling-label-filter=", "-data-items-dir="+data)
	test.Dir = o.ModuleDir
	test.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "KUBE_CACHE_MUTATION_DETECTOR=false", "ARTIFACTS="+o.LogDir)
	var output bytes.Buffer
	test.Stdout = io.MultiWriter(o.Output, &output)
	test.Stderr = test.Stdout
	runErr := test.Run()
	// A workload below its own gate (5000pods_500nodes: 56 pods/s) fails
	// the benchmark, yet it measured: its data items are written all the
	// same, and the gate is noted in the result.
	gates := belowGate(output.String())
	if runErr != nil && len(gates) == 0 {
		return nil, fmt.Errorf("%s (in %s; logs of failed workloads in %s): %w", strings.Join(test.Args, " "), o.ModuleDir, o.LogDir, runErr)
	}
	files, err := filepath.Glob(filepath.Join(data, "BenchmarkPerfScheduling_*.json"))
	if err != nil || len(files) == 0 {
		return nil, errors.Join(runErr, fmt.Errorf("scheduler_perf wrote no data items in %s", data))
	}
	var items []dataItem
	for _, f := range files {
		got, err := readDataItems(f)
		if err != nil {
			return nil, err
		}
		items = append(items, got...)
	}
	var results []Result
	for _, w := range workloads {
		r, err := upstreamResult(w, items)
		if err != nil {
			return nil, errors.Join(runErr, err)
		}
		r.Note = gates[w.Name]
		results = append(results, r)
	}
	return results, nil
}

// gateFailure is how scheduler_perf reports a workload below its
// threshold.
var gateFailure = regexp.MustCompile(`SchedulingWithResourceClaimTemplate/([0-9a-z_]+)/test: expected "SchedulingThroughput" "Average" to be higher: got ([0-9.]+), want ([0-9.]+)`)

// belowGate names the workloads below their gate, each with what it
// measured and the gate.
func belowGate(output string) map[string]string {
	gates := map[string]string{}
	for _, m := range gateFailure.FindAllStringSubmatch(output, -1) {
		gates[m[1]] = fmt.Sprintf("below scheduler_perf's own gate: average %s pods/s, gate %s", m[2], m[3])
	}
	return gates
}

// dataItem is scheduler_perf's result record (its DataItem).
type dataItem struct {
	Data   map[string]float64 `json:"data"`
	Unit   string             `json:"unit"`
	Labels map[string]string  `json:"labels"`
}

func readDataItems(path string) ([]dataItem, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc struct {
		DataItems []dataItem `json:"dataItems"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc.DataItems, nil
}

// upstreamResult picks a workload's figures from scheduler_perf's data
// items.
func upstreamResult(w UpstreamWorkload, items []dataItem) (Result, error) {
	name := "BenchmarkPerfScheduling/SchedulingWithResourceClaimTemplate/" + w.Name + "/test"
	find := func(metric string, labels map[string]string) (dataItem, bool) {
		i := slices.IndexFunc(items, func(d dataItem) bool {
			if d.Labels["Name"] != name || d.Labels["Metric"] != metric {
				return false
			}
			for k, v := range labels {
				if d.Labels[k] != v {
					return false
				}
			}
			return true
		})
		if i < 0 {
			return dataItem{}, false
		}
		return items[i], true
	}
	duration, ok := find("SchedulingDuration", nil)
	if !ok || duration.Data["Duration"] <= 0 {
		return Result{}, fmt.Errorf("scheduler_perf's data items have no SchedulingDuration for %s", name)
	}
	r := Result{
		Case:          "SchedulingWithResourceClaimTemplate/" + w.Name,
		Workload:      "SchedulingWithResourceClaimTemplate",
		State:         StateHalf,
		Nodes:         w.Nodes,
		Pods:          w.MeasurePods,
		PodsPerSecond: float64(w.MeasurePods) / duration.Data["Duration"],
		Source:        sourceUpstream,
	}
	if lat, ok := find(attemptMetric, map[string]string{"result": "scheduled"}); ok {
		p50, p99 := lat.Data["Perc50"]/1000, lat.Data["Perc99"]/1000
		r.P50, r.P99 = Latency{p50, p50}, Latency{p99, p99}
	}
	return r, nil
}

const sourceUpstream = "scheduler_perf"

// upstreamSettings are scheduler_perf's scheduler settings that differ
// from the lab's: its default configuration.
const upstreamSettings = "percentageOfNodesToScore adaptive (46 % at 500 nodes), parallelism 16"

// labSettings are the lab scheduler's settings a comparison names.
func labSettings(cp *config.ControlPlane) string {
	n := int32(config.DefaultPercentageOfNodesToScore)
	if cp != nil && cp.PercentageOfNodesToScore != nil {
		n = *cp.PercentageOfNodesToScore
	}
	return fmt.Sprintf("percentageOfNodesToScore %d %%", n)
}

// CompareUpstream runs each workload on the lab (RunUpstreamShape), then
// all of them with scheduler_perf, and returns the results of both (lab
// first) and one comparison per workload.
func CompareUpstream(ctx context.Context, o Options, uo UpstreamOptions, workloads []UpstreamWorkload) ([]Result, []Comparison, error) {
	var labResults []Result
	for _, w := range workloads {
		done := func(error) {}
		if o.Progress != nil {
			done = o.Progress("SchedulingWithResourceClaimTemplate/" + w.Name + " on the lab")
		}
		r, err := RunUpstreamShape(ctx, o, w)
		done(err)
		if err != nil {
			return nil, nil, err
		}
		labResults = append(labResults, r)
	}
	done := func(error) {}
	if o.Progress != nil {
		done = o.Progress("SchedulingWithResourceClaimTemplate with scheduler_perf (builds it and etcd first)")
	}
	upstream, err := RunUpstream(ctx, uo, workloads)
	done(err)
	if err != nil {
		return labResults, nil, err
	}
	var comparisons []Comparison
	for i, w := range workloads {
		comparisons = append(comparisons, Comparison{Workload: w.Name, Lab: labResults[i].PodsPerSecond, Upstream: upstream[i].PodsPerSecond,
			LabSettings: labSettings(o.ControlPlane), UpstreamSettings: upstreamSettings})
	}
	return append(labResults, upstream...), comparisons, nil
}
