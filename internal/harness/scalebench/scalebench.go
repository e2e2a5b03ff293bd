// Package scalebench measures the cost of reasoning: the embedded lab's
// real scheduler placing pods that count GPUs beside pods that claim them
// (a tier class, a CEL selector, a prioritized list, an extended resource
// served by DRA, matchAttribute), and pods that take whole 8-GPU servers
// alone or in gangs (PodGroups, with or without a topology constraint), on
// up to hundreds of virtual nodes.
//
// Virtual nodes are what scheduler_perf uses: Node objects and
// ResourceSlices the bench creates itself, with no kubelet; pods are bound
// and nothing runs. Each run gets a fresh lab of its own, so that no case
// inherits another's objects or memory.
package scalebench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// Options say what to run.
type Options struct {
	// Nodes are the cluster sizes (default 100 and 500).
	Nodes []int
	// Cases and States select the runs (default all); every case runs in
	// every state at every size.
	Cases  []string
	States []string
	// Binary is the dralab binary the labs run.
	Binary string
	// StateRoot is where the labs keep their state (default a temporary
	// directory, removed at the end).
	StateRoot string
	// ControlPlane tunes the labs' scheduler and controller manager.
	ControlPlane *config.ControlPlane
	// ClientQPS is the bench's own client QPS and burst (default 1000),
	// and Workers how many requests it has in flight (default 16).
	ClientQPS float32
	Workers   int
	// Progress, when set, is told of each run as it starts and ends.
	Progress func(run string) (done func(error))
	// LeftOut, when set, is told of each run left out and why: a case
	// of the default set that does not fit a size asked for.
	LeftOut func(run, why string)
	// Rounds is how many times every run is measured, each time on a
	// fresh lab (default 1): round after round, so that a ratio compares
	// runs of one round.
	Rounds int
}

// DefaultNodes are the sizes a run measures unless told otherwise.
var DefaultNodes = []int{100, 500}

// Result is one run's measurement.
type Result struct {
	// Case names the run as scheduler_perf would: <case>/<state>_<N>nodes.
	Case string `json:"case"`
	// Workload and State are the case and the state on their own.
	Workload string `json:"workload"`
	State    string `json:"state"`
	Nodes    int    `json:"nodes"`
	// Pods is the number of measured pods.
	Pods int `json:"pods"`
	// PodsPerSecond is Pods over the time from the first measured pod's
	// creation to the last one's binding.
	PodsPerSecond float64 `json:"podsPerSecond"`
	// P50 and P99 are the scheduler's own attempt latency
	// (scheduler_scheduling_attempt_duration_seconds, result scheduled)
	// over the measured phase: the histogram bucket each falls in.
	P50 Latency `json:"p50"`
	P99 Latency `json:"p99"`
	// CPUSecondsPerPod is the lab process's (etcd, API server, scheduler,
	// controller manager) CPU time in the measured phase, per pod.
	CPUSecondsPerPod float64 `json:"cpuSecondsPerPod"`
	// PeakRSSBytes is the lab process's peak resident set in the phase.
	PeakRSSBytes int64 `json:"peakRSSBytes"`
	// VsCounting is PodsPerSecond over the counting case's in the same
	// state and size: the cost of reasoning (1 for counting itself, 0
	// when counting was not run).
	VsCounting float64 `json:"vsCounting,omitempty"`
	// VsSinglePod, for the gang cases, is PodsPerSecond over the
	// whole-node case's in the same state and size: the cost of binding
	// pods as groups (0 when whole-node was not run).
	VsSinglePod float64 `json:"vsSinglePod,omitempty"`
	// Groups is the number of measured PodGroups of a gang case.
	Groups int `json:"groups,omitempty"`
	// Source is "dralab", or "scheduler_perf" for upstream's runs.
	Source string `json:"source"`
	// Note says what else the run reported, e.g. a gate it missed.
	Note string `json:"note,omitempty"`
	// Round is the run's round, from 1, when the runs were repeated.
	Round int `json:"round,omitempty"`
}

// Name is a run's name, like scheduler_perf's: first-available/empty_500nodes.
func Name(workload, state string, nodes int) string {
	return fmt.Sprintf("%s/%s_%dnodes", workload, state, nodes)
}

// Run runs every selected case in every state at every size, each on a
// fresh lab, and returns the results in that order.
func Run(ctx context.Context, o Options) ([]Result, error) {
	o, runs, err := plan(o)
	if err != nil {
		return nil, err
	}
	cleanup, err := orTempDir(&o.StateRoot, "dralab-scale-")
	if err != nil {
		return nil, err
	}
	defer cleanup()
	var results []Result
	for round := 1; round <= o.Rounds; round++ {
		for _, r := range runs {
			name := Name(r.workload, r.state, r.nodes)
			if o.Rounds > 1 {
				name += fmt.Sprintf(" (round %d of %d)", round, o.Rounds)
			}
			done := func(error) {}
			if o.Progress != nil {
				done = o.Progress(name)
			}
			res, err := o.runOne(ctx, r.workload, r.state, shapeOf(r.workload, r.state, r.nodes))
			done(err)
			if err != nil {
				return results, fmt.Errorf("%s: %w", name, err)
			}
			if o.Rounds > 1 {
				res.Round = round
			}
			results = append(results, res)
		}
	}
	CompareWithCounting(results)
	CompareGangsWithSinglePods(results)
	return results, nil
}

func (o Options) withDefaults() Options {
	if len(o.Nodes) == 0 {
		o.Nodes = DefaultNodes
	}
	if len(o.Cases) == 0 {
		o.Cases = Cases()
	}
	if len(o.States) == 0 {
		o.States = States()
	}
	if o.ClientQPS == 0 {
		o.ClientQPS = 1000
	}
	if o.Workers == 0 {
		o.Workers = 16
	}
	if o.Rounds < 1 {
		o.Rounds = 1
	}
	return o
}

// CompareWithCounting sets each result's VsCounting from the counting
// result of its state and size.
func CompareWithCounting(results []Result) {
	ratioTo(results, CaseCounting, func(r *Result) *float64 { return &r.VsCounting })
}

// CompareGangsWithSinglePods sets each gang result's VsSinglePod from the
// whole-node result of its state and size.
func CompareGangsWithSinglePods(results []Result) {
	ratioTo(results, CaseWholeNode, func(r *Result) *float64 {
		if r.Workload != CaseGang && r.Workload != CaseGangTopology {
			return nil
		}
		return &r.VsSinglePod
	})
}

// ratioTo sets, in each lab result that field gives a place for, its
// pods/s over the baseline case's in the same state, size and round.
func ratioTo(results []Result, baseline string, field func(*Result) *float64) {
	key := func(r *Result) string { return fmt.Sprintf("%s#%d", Name("", r.State, r.Nodes), r.Round) }
	base := map[string]float64{}
	for i := range results {
		if r := &results[i]; r.Workload == baseline && r.Source == sourceLab {
			base[key(r)] = r.PodsPerSecond
		}
	}
	for i := range results {
		r := &results[i]
		if b, f := base[key(r)], field(r); b > 0 && f != nil && r.Source == sourceLab {
			*f = r.PodsPerSecond / b
		}
	}
}

const sourceLab = "dralab"

// benchLabName names the labs the bench starts; their state lives under
// the bench's own state root, so no user's lab is touched.
const benchLabName = "scale-bench"

// RunUpstreamShape runs scheduler_perf's workload on the lab: its node
// count and devices per node, its claims of one device from a template,
// its half of the devices allocated first (by pods pinned to each node),
// then its measured pods, which fill the rest.
func RunUpstreamShape(ctx context.Context, o Options, uw UpstreamWorkload) (Result, error) {
	o = o.withDefaults()
	cleanup, err := orTempDir(&o.StateRoot, "dralab-scale-")
	if err != nil {
		return Result{}, err
	}
	defer cleanup()
	s := shape{nodes: uw.Nodes, devicesPerNode: uw.DevicesPerNode, prefillPerNode: uw.InitClaims / uw.Nodes, prefillNodes: uw.Nodes, measured: uw.MeasurePods}
	r, err := o.runOne(ctx, caseUpstream, StateHalf, s)
	r.Case = "SchedulingWithResourceClaimTemplate/" + uw.Name
	r.Workload = "SchedulingWithResourceClaimTemplate"
	return r, err
}

func (o Options) runOne(ctx context.Context, workloadName, state string, s shape) (_ Result, err error) {
	logger := klog.FromContext(ctx)
	w, err := workloadOf(workloadName)
	if err != nil {
		return Result{}, err
	}
	nodes := s.nodes
	if s.measured == 0 {
		return Result{}, fmt.Errorf("%d nodes leave no NVLink domain of %d servers free for a measured group", nodes, GroupSize)
	}
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Name: benchLabName, Nodes: []config.Node{}, ControlPlane: o.ControlPlane}
	if w.wholeNode {
		cfg.EnableGroupClaims(topologyGate)
	}
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(o.StateRoot), lab.WithBinary(o.Binary), lab.WithOwner(os.Getpid()))
	if err != nil {
		return Result{}, err
	}
	if _, err := l.Up(ctx); err != nil {
		return Result{}, err
	}
	defer func() {
		if derr := l.Down(context.WithoutCancel(ctx)); derr != nil {
			err = errors.Join(err, fmt.Errorf("deleting the bench's lab: %w", derr))
		}
	}()
	st, err := l.Status(ctx)
	if err != nil {
		return Result{}, err
	}
	rest, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return Result{}, err
	}
	rest.QPS, rest.Burst = o.ClientQPS, int(o.ClientQPS)
	// Protobuf, as the scheduler and the controller manager speak it: the
	// API server encodes and the bench decodes less than with JSON.
	rest.ContentType = "application/vnd.kubernetes.protobuf"
	rest.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return Result{}, err
	}

	start := time.Now()
	if err := o.setUp(ctx, client, w, nodes, s.devicesPerNode); err != nil {
		return Result{}, err
	}
	leaseCtx, stopLeases := context.WithCancel(ctx)
	defer stopLeases()
	go renewLeases(leaseCtx, client, nodes, o.Workers)
	pods, stop, err := watchPods(ctx, client)
	if err != nil {
		return Result{}, err
	}
	defer stop()
	if err := pods.untainted(ctx, nodes); err != nil {
		return Result{}, err
	}
	logger.V(1).Info("Virtual nodes created", "nodes", nodes, "elapsed", time.Since(start))

	// Warm up (empty) or fill half of every node (half): scheduled, not
	// measured.
	var warm []*v1.Pod
	for i := range s.prefillNodes * s.prefillPerNode {
		p := newPod("prefill", i)
		p.Spec.NodeSelector = map[string]string{v1.LabelHostname: nodeName(i % s.prefillNodes)}
		w.prefill(p)
		warm = append(warm, p)
	}
	for i := range s.warmup {
		p := newPod("warmup", i)
		w.request(p, i)
		warm = append(warm, p)
	}
	if len(warm) > 0 {
		if err := createGroups(ctx, client, w, warm); err != nil {
			return Result{}, err
		}
		if _, err := o.createAndWait(ctx, client, pods, warm); err != nil {
			return Result{}, fmt.Errorf("%s pods: %w", warm[0].Labels[phaseLabel], err)
		}
	}
	logger.V(1).Info("Cluster prepared", "state", state, "pods", len(warm), "elapsed", time.Since(start))

	measured := s.measured
	var batch []*v1.Pod
	for i := range measured {
		p := newPod("measure", i)
		w.request(p, len(warm)+i)
		batch = append(batch, p)
	}
	if err := createGroups(ctx, client, w, batch); err != nil {
		return Result{}, err
	}
	before, err := schedulerAttempts(ctx, client)
	if err != nil {
		return Result{}, err
	}
	cpuBefore, err := cpuSeconds(st.PID)
	if err != nil {
		return Result{}, err
	}
	if err := resetPeakRSS(st.PID); err != nil {
		return Result{}, err
	}
	elapsed, err := o.createAndWait(ctx, client, pods, batch)
	if err != nil {
		return Result{}, fmt.Errorf("measured pods: %w", err)
	}
	cpuAfter, err := cpuSeconds(st.PID)
	if err != nil {
		return Result{}, err
	}
	rss, err := peakRSS(st.PID)
	if err != nil {
		return Result{}, err
	}
	if t := pods.taint(); t != "" {
		return Result{}, fmt.Errorf("virtual node %s was tainted during the run: its lease renewals fell behind, and the measurement lost nodes", t)
	}
	// The scheduler counts an attempt once its binding returns, a moment
	// after the binding is seen.
	var attempts histogram
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		after, err := schedulerAttempts(ctx, client)
		attempts = after.since(before)
		return attempts.count >= uint64(measured), err
	})
	if err != nil {
		return Result{}, fmt.Errorf("the scheduler's %s counts %d scheduled attempts for %d bound pods: %w", attemptMetric, attempts.count, measured, err)
	}
	if w.gang {
		if err := checkGangsWhole(ctx, client, w, batch); err != nil {
			return Result{}, err
		}
	}
	groups := 0
	if w.gang {
		groups = measured / GroupSize
	}
	return Result{
		Case:             Name(workloadName, state, nodes),
		Workload:         workloadName,
		State:            state,
		Nodes:            nodes,
		Pods:             measured,
		Groups:           groups,
		PodsPerSecond:    float64(measured) / elapsed.Seconds(),
		P50:              attempts.quantile(0.5),
		P99:              attempts.quantile(0.99),
		CPUSecondsPerPod: (cpuAfter - cpuBefore) / float64(measured),
		PeakRSSBytes:     rss,
		Source:           sourceLab,
	}, nil
}

// setUp creates the namespace, the case's classes and templates, and the
// virtual nodes.
func (o Options) setUp(ctx context.Context, client kubernetes.Interface, w *workload, nodes, devicesPerNode int) error {
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	if !w.counting {
		for _, c := range append(gpu.DeviceClasses(), w.classes...) {
			if _, err := client.ResourceV1().DeviceClasses().Create(ctx, &c, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("creating DeviceClass %s: %w", c.Name, err)
			}
		}
	}
	for _, t := range append(w.templates, w.prefillTemplates()...) {
		if _, err := client.ResourceV1().ResourceClaimTemplates(Namespace).Create(ctx, &t, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating ResourceClaimTemplate %s: %w", t.Name, err)
		}
	}
	if err := createNodes(ctx, client, nodes, devicesPerNode, w.counting, o.Workers); err != nil {
		return err
	}
	// Pods are admitted once the namespace has its service account.
	return cluster.WaitForServiceAccount(ctx, client, Namespace)
}

// createGroups creates the PodGroups the pods join, before any of them.
func createGroups(ctx context.Context, client kubernetes.Interface, w *workload, pods []*v1.Pod) error {
	var names []string
	for _, p := range pods {
		if g := p.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil && !slices.Contains(names, *g.PodGroupName) {
			names = append(names, *g.PodGroupName)
		}
	}
	for _, name := range names {
		if _, err := client.SchedulingV1beta1().PodGroups(Namespace).Create(ctx, w.podGroup(name), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("creating PodGroup %s: %w", name, err)
		}
	}
	return nil
}

// checkGangsWhole asserts that a gang case measured what it claims: every
// pod kept its group, the scheduler marked every group scheduled, and with
// the topology constraint each group's pods share one NVLink domain. A
// bench whose groups were ignored would measure single pods.
func checkGangsWhole(ctx context.Context, client kubernetes.Interface, w *workload, pods []*v1.Pod) error {
	byGroup := map[string][]string{}
	for _, p := range pods {
		got, err := client.CoreV1().Pods(Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if got.Spec.SchedulingGroup == nil || got.Spec.SchedulingGroup.PodGroupName == nil {
			return fmt.Errorf("pod %s lost its schedulingGroup: the API server does not serve the workload gates", p.Name)
		}
		g := *got.Spec.SchedulingGroup.PodGroupName
		byGroup[g] = append(byGroup[g], got.Spec.NodeName)
	}
	for g, nodes := range byGroup {
		group, err := client.SchedulingV1beta1().PodGroups(Namespace).Get(ctx, g, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if c := apimeta.FindStatusCondition(group.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled); c == nil || c.Status != metav1.ConditionTrue {
			return fmt.Errorf("PodGroup %s has its %d pods bound, but its condition %s is %v", g, len(nodes), schedulingv1beta1.PodGroupInitiallyScheduled, c)
		}
		if !w.topology {
			continue
		}
		domains := map[string]bool{}
		for _, n := range nodes {
			var i int
			if _, err := fmt.Sscanf(n, "vnode-%04d", &i); err != nil {
				return fmt.Errorf("pod of group %s on %q, not a virtual node", g, n)
			}
			domains[domainOf(i).NVLinkDomain] = true
		}
		if len(domains) != 1 {
			return fmt.Errorf("PodGroup %s spans NVLink domains %v despite its topology constraint", g, slices.Sorted(maps.Keys(domains)))
		}
	}
	return nil
}

// orTempDir sets an unset *dir to a new temporary directory and returns
// what removes it; a directory given is left alone.
func orTempDir(dir *string, pattern string) (func(), error) {
	if *dir != "" {
		return func() {}, nil
	}
	d, err := os.MkdirTemp("", pattern)
	if err != nil {
		return nil, err
	}
	*dir = d
	return func() { os.RemoveAll(d) }, nil
}
