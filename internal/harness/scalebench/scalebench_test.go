package scalebench

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// attemptsText is the scheduler's attempt histogram as the API server's
// /metrics serves it, with an unschedulable series to be left out.
func attemptsText(scheduled [4]int) string {
	var b strings.Builder
	b.WriteString("# HELP scheduler_scheduling_attempt_duration_seconds [STABLE] Scheduling attempt latency in seconds (scheduling algorithm + binding)\n")
	b.WriteString("# TYPE scheduler_scheduling_attempt_duration_seconds histogram\n")
	bounds := []string{"0.001", "0.01", "0.1", "+Inf"}
	for i, le := range bounds {
		b.WriteString(`scheduler_scheduling_attempt_duration_seconds_bucket{le="` + le + `",profile="default-scheduler",result="unschedulable"} 7` + "\n")
		b.WriteString(`scheduler_scheduling_attempt_duration_seconds_bucket{le="` + le + `",profile="default-scheduler",result="scheduled"} ` + strconv.Itoa(scheduled[i]) + "\n")
	}
	b.WriteString(`scheduler_scheduling_attempt_duration_seconds_sum{profile="default-scheduler",result="scheduled"} 1` + "\n")
	b.WriteString(`scheduler_scheduling_attempt_duration_seconds_count{profile="default-scheduler",result="scheduled"} ` + strconv.Itoa(scheduled[3]) + "\n")
	b.WriteString("# TYPE apiserver_request_total counter\napiserver_request_total{code=\"200\"} 5\n")
	return b.String()
}

func TestAttemptQuantilesOverThePhase(t *testing.T) {
	before, err := parseAttempts([]byte(attemptsText([4]int{5, 5, 5, 5})))
	if err != nil {
		t.Fatal(err)
	}
	// 100 attempts in the phase: none under 1 ms, 50 under 10 ms, all
	// under 100 ms.
	after, err := parseAttempts([]byte(attemptsText([4]int{5, 55, 105, 105})))
	if err != nil {
		t.Fatal(err)
	}
	phase := after.since(before)
	if phase.count != 100 {
		t.Fatalf("phase has %d attempts, want 100", phase.count)
	}
	// A quantile is the bucket it falls in, never a value interpolated
	// within it.
	for _, c := range []struct {
		q    float64
		want Latency
		text string
	}{
		{0.5, Latency{0.001, 0.01}, "(1, 10]"},  // the 50th attempt ends the (1 ms, 10 ms] bucket
		{0.99, Latency{0.01, 0.1}, "(10, 100]"}, // the 99th is in (10 ms, 100 ms]
	} {
		if got := phase.quantile(c.q); got != c.want || got.String() != c.text {
			t.Errorf("p%g = %+v (%s), want %+v (%s)", c.q*100, got, got, c.want, c.text)
		}
	}
	if got := after.quantile(1); got != (Latency{0.01, 0.1}) {
		t.Errorf("p100 = %+v, want the last finite bucket (10 ms, 100 ms]", got)
	}
	if s := (Latency{0.006, 0.006}).String(); s != "≈6.0" {
		t.Errorf("an estimate prints %q, want ≈6.0", s)
	}
	if s := (Latency{LowSeconds: 0.1}).String(); s != "> 100" {
		t.Errorf("beyond the last bucket prints %q, want > 100", s)
	}
	none, err := parseAttempts([]byte("# TYPE apiserver_request_total counter\napiserver_request_total 1\n"))
	if err != nil || none.count != 0 || !none.quantile(0.5).IsZero() {
		t.Errorf("metrics without attempts: %+v, %v", none, err)
	}
	if _, err := parseAttempts([]byte("scheduler_scheduling_attempt_duration_seconds_bucket{le=\"0.1\" 3\n")); err == nil {
		t.Error("malformed metrics parsed")
	}
}

func TestOwnCPUAndPeakRSS(t *testing.T) {
	pid := os.Getpid()
	before, err := cpuSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn a little CPU, more than a clock tick.
	x := 0
	for deadline := 0; deadline < 3e8; deadline++ {
		x += deadline % 7
	}
	after, err := cpuSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time went from %g s to %g s after burning %d", before, after, x)
	}
	if err := resetPeakRSS(pid); err != nil {
		t.Fatal(err)
	}
	peak, err := peakRSS(pid)
	if err != nil || peak < 1<<20 {
		t.Errorf("peak RSS %d bytes, %v", peak, err)
	}
	if _, err := cpuSeconds(1 << 30); err == nil {
		t.Error("CPU time of a process that cannot exist")
	}
}

func TestParseNodes(t *testing.T) {
	got, err := ParseNodes("10, 200,500")
	if err != nil || len(got) != 3 || got[0] != 10 || got[1] != 200 || got[2] != 500 {
		t.Errorf("ParseNodes = %v, %v", got, err)
	}
	for _, bad := range []string{"ten", "2", "10x", "-5"} {
		if _, err := ParseNodes(bad); err == nil || !strings.Contains(err.Error(), "DRALAB_BENCH_NODES") {
			t.Errorf("ParseNodes(%q) = %v, want an error naming DRALAB_BENCH_NODES", bad, err)
		}
	}
}

func TestBelowGate(t *testing.T) {
	out := "        \top 7: BenchmarkPerfScheduling/SchedulingWithResourceClaimTemplate/5000pods_500nodes/test: expected \"SchedulingThroughput\" \"Average\" to be higher: got 46.207392, want 56.000000\n--- FAIL: BenchmarkPerfScheduling\n"
	got := belowGate(out)
	if len(got) != 1 || got["5000pods_500nodes"] != "below scheduler_perf's own gate: average 46.207392 pods/s, gate 56.000000" {
		t.Errorf("belowGate = %v", got)
	}
	if got := belowGate("PASS\n"); len(got) != 0 {
		t.Errorf("belowGate of a pass = %v", got)
	}
}

func TestCompareWithCounting(t *testing.T) {
	rs := []Result{
		{Workload: CaseCounting, State: StateEmpty, Nodes: 100, PodsPerSecond: 80, Source: sourceLab},
		{Workload: CaseFirstAvailable, State: StateEmpty, Nodes: 100, PodsPerSecond: 40, Source: sourceLab},
		{Workload: CaseFirstAvailable, State: StateHalf, Nodes: 100, PodsPerSecond: 30, Source: sourceLab},
		{Workload: "SchedulingWithResourceClaimTemplate", State: StateEmpty, Nodes: 100, PodsPerSecond: 90, Source: sourceUpstream},
	}
	CompareWithCounting(rs)
	for i, want := range []float64{1, 0.5, 0, 0} {
		if rs[i].VsCounting != want {
			t.Errorf("%s %s: ÷ counting = %g, want %g", rs[i].Workload, rs[i].State, rs[i].VsCounting, want)
		}
	}
}

func TestCompareGangsWithSinglePods(t *testing.T) {
	rs := []Result{
		{Workload: CaseWholeNode, State: StateEmpty, Nodes: 100, PodsPerSecond: 40, Source: sourceLab},
		{Workload: CaseGang, State: StateEmpty, Nodes: 100, PodsPerSecond: 30, Source: sourceLab},
		{Workload: CaseGangTopology, State: StateEmpty, Nodes: 100, PodsPerSecond: 10, Source: sourceLab},
		{Workload: CaseGang, State: StateHalf, Nodes: 100, PodsPerSecond: 30, Source: sourceLab},
		{Workload: CaseFirstAvailable, State: StateEmpty, Nodes: 100, PodsPerSecond: 20, Source: sourceLab},
	}
	CompareGangsWithSinglePods(rs)
	for i, want := range []float64{0, 0.75, 0.25, 0, 0} {
		if rs[i].VsSinglePod != want {
			t.Errorf("%s %s: ÷ single pod = %g, want %g", rs[i].Workload, rs[i].State, rs[i].VsSinglePod, want)
		}
	}
}

// TestWholeNodeShape: the measured gangs fit, each in an NVLink domain
// that nothing else holds, at every size.
func TestWholeNodeShape(t *testing.T) {
	for _, c := range []struct {
		nodes                int
		state                string
		prefillNodes, groups int
	}{
		{16, StateEmpty, 0, 1},
		{16, StateHalf, 8, 1},
		{100, StateEmpty, 0, 11},
		{100, StateHalf, 50, 5}, // nodes 50-55 share domain 6 with 48 and 49
		{500, StateEmpty, 0, 61},
		{500, StateHalf, 250, 30}, // nodes 248-255 share domain 31
		{15, StateEmpty, 0, 0},
	} {
		for _, w := range WholeNodeCases() {
			s := shapeOf(w, c.state, c.nodes)
			if s.prefillNodes != c.prefillNodes || s.measured != c.groups*GroupSize {
				t.Errorf("%s/%s_%d: %d prefilled nodes, %d measured pods; want %d and %d", w, c.state, c.nodes, s.prefillNodes, s.measured, c.prefillNodes, c.groups*GroupSize)
			}
			taken := s.prefillNodes
			if c.state == StateEmpty {
				taken = s.warmup // one domain's worth, at worst one domain each
			}
			freeDomains := 0
			for d := range c.nodes / GroupSize {
				if d*GroupSize >= taken {
					freeDomains++
				}
			}
			if c.state == StateEmpty && c.nodes >= GangMinNodes {
				freeDomains = c.nodes/GroupSize - 1
			}
			if s.measured/GroupSize > freeDomains {
				t.Errorf("%s/%s_%d: %d groups, %d free domains", w, c.state, c.nodes, s.measured/GroupSize, freeDomains)
			}
		}
	}
	if a, b := domainOf(7), domainOf(8); a == b || domainOf(0) != a || a.NVLinkDomain == "" || a.Rack == "" {
		t.Errorf("domains of nodes 0, 7, 8: %v, %v, %v", domainOf(0), a, b)
	}
	if n := virtualNode(9, GPUsPerNode, false); n.Labels["topology.dralab.dev/nvlink-domain"] != domainOf(9).NVLinkDomain {
		t.Errorf("virtual node 9 has labels %v", n.Labels)
	}
}

func TestEveryCaseHasAWorkload(t *testing.T) {
	for _, c := range append(Cases(), caseUpstream) {
		w, err := workloadOf(c)
		if err != nil {
			t.Fatal(err)
		}
		pod := newPod("measure", 0)
		w.request(pod, 0)
		claims, limits := len(pod.Spec.ResourceClaims), len(pod.Spec.Containers[0].Resources.Limits)
		switch c {
		case CaseCounting, CaseExtendedResource:
			if claims != 0 || limits != 1 {
				t.Errorf("%s: %d claims and %d limits, want a count only", c, claims, limits)
			}
		default:
			if claims != 1 || len(pod.Spec.Containers[0].Resources.Claims) != 1 || limits != 0 {
				t.Errorf("%s: %d claims and %d limits, want one claim", c, claims, limits)
			}
			if len(w.templates) == 0 {
				t.Errorf("%s: no claim template", c)
			}
		}
	}
	// Gang pods join a group of GroupSize in turn; the single whole-node
	// pods join none.
	for _, c := range WholeNodeCases() {
		w, _ := workloadOf(c)
		groups := map[string]int{}
		for i := range 2 * GroupSize {
			pod := newPod("measure", i)
			w.request(pod, i)
			if g := pod.Spec.SchedulingGroup; g != nil {
				groups[*g.PodGroupName]++
			}
			if got := w.templates[0].Spec.Spec.Devices.Requests[0].Exactly.Count; got != GPUsPerNode {
				t.Errorf("%s asks for %d GPUs, want a server's %d", c, got, GPUsPerNode)
			}
		}
		if want := map[bool]int{true: 2}[c != CaseWholeNode]; len(groups) != want || (want > 0 && (groups[groupName(0)] != GroupSize || groups[groupName(GroupSize)] != GroupSize)) {
			t.Errorf("%s: groups %v, want %d of %d pods", c, groups, want, GroupSize)
		}
		g := w.podGroup("g")
		if g.Spec.SchedulingPolicy.Gang == nil || g.Spec.SchedulingPolicy.Gang.MinCount != GroupSize || (g.Spec.SchedulingConstraints != nil) != (c == CaseGangTopology) {
			t.Errorf("%s: PodGroup %+v", c, g.Spec)
		}
	}
	if _, err := workloadOf("fastest"); err == nil || !strings.Contains(err.Error(), "first-available") {
		t.Errorf("unknown case: %v", err)
	}
	// The claim case takes the three tiers in turn.
	w, _ := workloadOf(CaseClaim)
	seen := map[string]bool{}
	for i := range 3 {
		pod := newPod("measure", i)
		w.request(pod, i)
		seen[*pod.Spec.ResourceClaims[0].ResourceClaimTemplateName] = true
	}
	if len(seen) != 3 {
		t.Errorf("claim pods use templates %v, want one per tier", seen)
	}
}

func TestUpstreamDataItems(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "BenchmarkPerfScheduling_benchmark_dra_2026-12-01T21:00:00Z.json")
	const doc = `{"version":"v1","dataItems":[
 {"data":{"Average":88.1,"Perc50":90},"unit":"pods/s","labels":{"Metric":"SchedulingThroughput","Name":"BenchmarkPerfScheduling/SchedulingWithResourceClaimTemplate/5000pods_500nodes/test"}},
 {"data":{"Duration":31.25},"unit":"s","labels":{"Metric":"SchedulingDuration","Name":"BenchmarkPerfScheduling/SchedulingWithResourceClaimTemplate/5000pods_500nodes/test"}},
 {"data":{"Perc50":4,"Perc99":30},"unit":"ms","labels":{"Metric":"scheduler_scheduling_attempt_duration_seconds","Name":"BenchmarkPerfScheduling/SchedulingWithResourceClaimTemplate/5000pods_500nodes/test","result":"unschedulable"}},
 {"data":{"Perc50":6,"Perc99":45},"unit":"ms","labels":{"Metric":"scheduler_scheduling_attempt_duration_seconds","Name":"BenchmarkPerfScheduling/SchedulingWithResourceClaimTemplate/5000pods_500nodes/test","result":"scheduled"}}
]}`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	items, err := readDataItems(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := upstreamResult(UpstreamWorkloads[1], items)
	if err != nil {
		t.Fatal(err)
	}
	if r.Case != "SchedulingWithResourceClaimTemplate/5000pods_500nodes" || r.Pods != 2500 || r.PodsPerSecond != 80 || r.P50 != (Latency{0.006, 0.006}) || r.P99 != (Latency{0.045, 0.045}) || r.Source != sourceUpstream {
		t.Errorf("upstream result %+v", r)
	}
	if _, err := upstreamResult(UpstreamWorkloads[0], items); err == nil || !strings.Contains(err.Error(), "2000pods_200nodes") {
		t.Errorf("a workload without data items: %v", err)
	}
	if err := os.WriteFile(file, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readDataItems(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("malformed data items: %v", err)
	}
}

// bench:scale at a size too small for the whole-server cases runs the
// rest, saying which it left out; cases the caller named must all fit.
func TestPlanLeavesOutWhatDoesNotFit(t *testing.T) {
	var left []string
	_, runs, err := plan(Options{Nodes: []int{10}, States: []string{StateEmpty}, LeftOut: func(run, why string) { left = append(left, run+": "+why) }})
	if err != nil {
		t.Fatalf("the default cases on 10 nodes: %v; want the ones that fit", err)
	}
	var ran []string
	for _, r := range runs {
		ran = append(ran, r.workload)
		if slices.Contains(WholeNodeCases(), r.workload) {
			t.Errorf("planned %s on 10 nodes", r.workload)
		}
	}
	if len(runs) == 0 || len(runs)+len(left) != len(Cases()) || len(left) != len(WholeNodeCases()) {
		t.Errorf("planned %v, left out %v; want every case, the whole-server ones left out", ran, left)
	}
	for _, l := range left {
		if !strings.Contains(l, "_10nodes: needs at least 16") {
			t.Errorf("left out %q; want the run and the 16 nodes it needs", l)
		}
	}
	if _, _, err := plan(Options{Nodes: []int{10}, Cases: []string{CaseGang}}); err == nil || !strings.Contains(err.Error(), "needs at least 16") {
		t.Errorf("a gang asked for on 10 nodes: %v; want the 16 nodes it needs", err)
	}
}

// Repeated runs are summarized as medians to two significant figures with
// their range, a ratio compares runs of one round, and a ratio whose runs
// include 1 is marked as no effect.
func TestSummarizeRounds(t *testing.T) {
	var results []Result
	for round, rates := range [][2]float64{{60, 59}, {64, 70}, {57, 55}} {
		results = append(results,
			Result{Case: "whole-node/empty_100nodes", Workload: CaseWholeNode, State: StateEmpty, Nodes: 100, Pods: 88, PodsPerSecond: rates[0], CPUSecondsPerPod: 0.031, Source: sourceLab, Round: round + 1},
			Result{Case: "gang/empty_100nodes", Workload: CaseGang, State: StateEmpty, Nodes: 100, Pods: 88, Groups: 11, PodsPerSecond: rates[1], CPUSecondsPerPod: 0.032, Source: sourceLab, Round: round + 1})
	}
	CompareGangsWithSinglePods(results)
	// Round by round: 59/60, 70/64, 55/57.
	if got := results[3].VsSinglePod; math.Abs(got-70.0/64) > 1e-9 {
		t.Errorf("round 2's gang ÷ single pod = %v, want 70/64", got)
	}
	s := Summarize(results)
	if len(s) != 2 || s[1].Case != "gang/empty_100nodes" || s[1].Runs != 3 {
		t.Fatalf("summaries = %+v, want whole-node and gang, 3 runs each", s)
	}
	if got := s[0].PodsPerSecond.String(); got != "60 (57–64)" {
		t.Errorf("whole-node pods/s = %q, want 60 (57–64)", got)
	}
	if got := s[1].VsSinglePod; !got.Includes(1) || got.Median != 59.0/60 {
		t.Errorf("gang ÷ single pod = %+v, want the median 59/60 and a range that includes 1", got)
	}
	var b strings.Builder
	if err := WriteSummary(&b, s); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "≈ 0.98 (0.96–1.1)") {
		t.Errorf("the summary does not mark gang ÷ single pod as within the noise:\n%s", b.String())
	}
	if got := ratio(Spread{Median: 1, Min: 1, Max: 1}, 3); got != "1.0" {
		t.Errorf("a ratio that is 1 in every run = %q, want 1.0, no mark", got)
	}
	for v, want := range map[float64]string{328.7: "330", 0.456: "0.46", 99.6: "100", 1.04: "1.0", 46.8: "47", 0.12: "0.12"} {
		if got := sig2(v); got != want {
			t.Errorf("sig2(%v) = %q, want %q", v, got, want)
		}
	}
}
