package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/kubeapply"
	"github.com/dralab/dralab/scenarios/report"
)

// ErrUnmet means the cluster lacks what a scenario requires.
var ErrUnmet = errors.New("the cluster does not meet the scenario's requirements")

// fieldManager owns what the runner applies.
const fieldManager = "dralab-scenario"

// LabelManagedBy, set to "dralab-scenario", marks every object a scenario
// run creates.
const LabelManagedBy = "app.kubernetes.io/managed-by"

// Runner applies scenarios to a cluster and checks their outcomes.
type Runner struct {
	Client  kubernetes.Interface
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
	// StepTimeout bounds how long a step may take to reach its expected
	// outcome. A failing step reports its mismatches after it.
	StepTimeout time.Duration
	// OnStep, if set, is told each step's allocation table.
	OnStep func(step string, rows []report.Row)
	// KeepNamespace leaves the scenario's namespace for inspection.
	KeepNamespace bool
	// BeforeCleanup, if set, is called before the scenario's objects are
	// deleted, e.g. to collect diagnostics of a failed run.
	BeforeCleanup func(ctx context.Context, result *Result)
	// GPUFaults fails and heals GPUs through their nodes' drivers: only a
	// dralab lab can. Without it, scenarios that fail GPUs are unmet.
	GPUFaults GPUFaulter
}

// GPUFaulter fails and heals a node's GPU, as gpu:fail and gpu:heal do.
type GPUFaulter interface {
	FailGPU(ctx context.Context, node, device string, xid int) error
	HealGPU(ctx context.Context, node, device string) error
}

// NewRunner returns a runner for the cluster of a REST config.
func NewRunner(cfg *rest.Config) (*Runner, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco))
	return &Runner{Client: client, Dynamic: dyn, Mapper: mapper, StepTimeout: time.Minute}, nil
}

// Result is what a scenario run found.
type Result struct {
	Scenario  string
	Namespace string
	Steps     []StepResult
	Duration  time.Duration
}

// StepResult is one step's allocation table and mismatches.
type StepResult struct {
	Name     string
	Rows     []report.Row
	Failures []string
	// Expectations are the step's expectations, each checked.
	Expectations []ExpectationResult
	// Snapshot is the cluster as the step's outcome was read from it: the
	// nodes and slices, and the scenario namespace's pods and claims.
	Snapshot *report.Snapshot
}

// Failures lists every mismatch, prefixed with its step.
func (r *Result) Failures() []string {
	var out []string
	for i, s := range r.Steps {
		for _, f := range s.Failures {
			out = append(out, fmt.Sprintf("steps[%d] %q: %s", i, s.Name, f))
		}
	}
	return out
}

// Passed reports whether every expectation held.
func (r *Result) Passed() bool { return len(r.Failures()) == 0 }

// Run runs a scenario in a namespace of its own and deletes everything it
// created afterwards. An error means the scenario could not run; a
// mismatch between expected and actual outcomes is in the Result.
func (r *Runner) Run(ctx context.Context, s *Scenario) (_ *Result, err error) {
	start := time.Now()
	inv, err := r.inventory(ctx)
	if err != nil {
		return nil, err
	}
	if err := inv.meets(s.Requires); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
	}
	if err := r.serves(s.Requires.Resources); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", s.Name, err)
	}
	if s.FailsGPUs() && r.GPUFaults == nil {
		return nil, fmt.Errorf("scenario %s: %w: it fails GPUs through their drivers (failGPU), which only a dralab lab can: run it on one (go run mage.go scenario:run %s)", s.Name, ErrUnmet, s.Name)
	}
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   fmt.Sprintf("dralab-%s-%s", s.Name, rand.String(5)),
		Labels: s.NamespaceLabels,
	}}
	if _, err := r.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("creating the scenario's namespace: %w", err)
	}
	run := &run{Runner: r, s: s, ns: ns.Name, inv: inv}
	result := &Result{Scenario: s.Name, Namespace: ns.Name}
	defer func() {
		cctx := context.WithoutCancel(ctx)
		if r.BeforeCleanup != nil {
			r.BeforeCleanup(cctx, result)
		}
		if cerr := run.cleanup(cctx); cerr != nil && err == nil {
			err = cerr
		}
	}()
	for i, st := range s.Steps {
		if err := run.act(ctx, st); err != nil {
			return result, fmt.Errorf("scenario %s, steps[%d] %q: %w", s.Name, i, st.Name, err)
		}
		sr, err := run.await(ctx, st)
		if err != nil {
			return result, fmt.Errorf("scenario %s, steps[%d] %q: %w", s.Name, i, st.Name, err)
		}
		result.Steps = append(result.Steps, sr)
		if r.OnStep != nil {
			r.OnStep(st.Name, sr.Rows)
		}
	}
	result.Duration = time.Since(start)
	return result, nil
}

// inventory reads the GPUs free for the scenario, per tier: devices that
// no claim holds and no taint keeps (NoSchedule or NoExecute, on the device
// or from a DeviceTaintRule), and counted GPUs that no pod requests. Scenarios derive
// their counts from it, so they fit any cluster with the tiers they need,
// other workloads included.
func (r *Runner) inventory(ctx context.Context) (Inventory, error) {
	snap, err := report.Read(ctx, r.Client, metav1.NamespaceDefault)
	if err != nil {
		return Inventory{}, err
	}
	inv := Inventory{Devices: map[string]int{}, Counted: map[string]int{}, CountedNodes: map[string]int{}, Partitioned: map[string]int{}, Shared: map[string]int{}, Attached: map[string]int{}, Overhead: map[string]int{}, TimeSliced: map[string]int{}, NodeLabels: map[string]bool{}, Plain: map[string]int{}, Partitions: snap.FreePartitions(), Shares: map[string][]report.FreeShare{}, Groups: map[string]map[string]map[string]int{}, Published: map[string]map[string]int{}, Drivers: map[string]int{}, FreeOnNode: map[string]map[string]int{}, NodeLabelsOf: map[string]map[string]string{}, Tainted: map[string]int{}}
	shares := map[string]report.FreeShare{}
	for _, f := range snap.FreeShares(gpu.CapacityMemory) {
		shares[f.Driver+"/"+f.Pool+"/"+f.Device] = f
	}
	// Free as the allocator counts it: a whole GPU whose MIG devices are
	// taken, or that shares no compatibility group with what runs on it,
	// is not free, though no claim holds it.
	free := snap.FreeDevices(gpu.DriverName)
	// Counter sets (pool/set) with MIG devices, and with time-sliced shares.
	kinds := map[string]map[string]bool{}
	for _, sl := range snap.Slices {
		if sl.Spec.Driver != gpu.DriverName {
			continue
		}
		for _, d := range sl.Spec.Devices {
			for _, cons := range d.ConsumesCounters {
				k := sl.Spec.Pool.Name + "/" + cons.CounterSet
				if kinds[k] == nil {
					kinds[k] = map[string]bool{}
				}
				kinds[k][ptr.Deref(d.Attributes[gpu.AttrType].StringValue, "")] = true
			}
		}
	}
	freeOf := map[string]map[string]bool{gpu.DriverName: free}
	for _, sl := range snap.Slices {
		inv.Drivers[sl.Spec.Driver] += len(sl.Spec.Devices)
		if sl.Spec.Driver != gpu.DriverName {
			if freeOf[sl.Spec.Driver] == nil {
				freeOf[sl.Spec.Driver] = snap.FreeDevices(sl.Spec.Driver)
			}
			for i := range sl.Spec.Devices {
				d := &sl.Spec.Devices[i]
				if freeOf[sl.Spec.Driver][sl.Spec.Driver+"/"+sl.Spec.Pool.Name+"/"+d.Name] && len(snap.Taints(sl.Spec.Driver, sl.Spec.Pool.Name, d)) == 0 {
					inv.addFree(ctx, snap, &sl, d, "")
				}
			}
			continue
		}
		for i := range sl.Spec.Devices {
			key := sl.Spec.Driver + "/" + sl.Spec.Pool.Name + "/" + sl.Spec.Devices[i].Name
			tier, err := report.Tier(ctx, sl.Spec.Driver, &sl.Spec.Devices[i])
			if err != nil {
				return inv, err
			}
			if tier != "" {
				node := ptr.Deref(sl.Spec.NodeName, "")
				if inv.Published[tier] == nil {
					inv.Published[tier] = map[string]int{}
				}
				inv.Published[tier][node]++
			}
			// A tainted device is not the scenario's: its requests do
			// not tolerate the taints gpu:fail and DeviceTaintRules put.
			if tier == "" {
				continue
			}
			if len(snap.Taints(sl.Spec.Driver, sl.Spec.Pool.Name, &sl.Spec.Devices[i])) > 0 {
				inv.Tainted[tier]++
				continue
			}
			if f, ok := shares[key]; ok {
				inv.Shares[tier] = append(inv.Shares[tier], f)
			}
			if !free[key] {
				continue
			}
			inv.Devices[tier]++
			inv.addFree(ctx, snap, &sl, &sl.Spec.Devices[i], tier)
			if node := ptr.Deref(sl.Spec.NodeName, ""); node != "" {
				if inv.FreeOnNode[tier] == nil {
					inv.FreeOnNode[tier] = map[string]int{}
				}
				inv.FreeOnNode[tier][node]++
			}
			inv.addToGroups(tier, sl.Spec.Pool.Name, &sl.Spec.Devices[i])
			if len(sl.Spec.Devices[i].ConsumesCounters) > 0 {
				inv.Partitioned[tier]++
			}
			if ptr.Deref(sl.Spec.Devices[i].AllowMultipleAllocations, false) {
				inv.Shared[tier]++
			}
			if len(sl.Spec.Devices[i].BindingConditions) > 0 {
				inv.Attached[tier]++
			}
			if len(sl.Spec.Devices[i].NodeAllocatableResources) > 0 {
				inv.Overhead[tier]++
			}
			for _, cons := range sl.Spec.Devices[i].ConsumesCounters {
				if k := kinds[sl.Spec.Pool.Name+"/"+cons.CounterSet]; k[gpu.TypeMIG] && k[gpu.TypeTimeSlice] {
					inv.TimeSliced[tier]++
					break
				}
			}
			if d := &sl.Spec.Devices[i]; len(d.ConsumesCounters) == 0 && !ptr.Deref(d.AllowMultipleAllocations, false) && len(d.BindingConditions) == 0 {
				inv.Plain[tier]++
			}
		}
	}
	pods, err := r.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return inv, err
	}
	requested := map[string]int64{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			q := c.Resources.Limits[v1.ResourceName(gpu.ExtendedResource)]
			requested[p.Spec.NodeName] += q.Value()
		}
	}
	for _, n := range snap.Nodes {
		inv.NodeLabelsOf[n.Name] = n.Labels
		for k, v := range n.Labels {
			inv.NodeLabels[k+"="+v] = true
		}
		q, ok := n.Status.Allocatable[v1.ResourceName(gpu.ExtendedResource)]
		if !ok {
			continue
		}
		if tier := report.NodeTier(n); tier != "" {
			free := int(q.Value() - requested[n.Name])
			inv.Counted[tier] += free
			if free > 0 {
				inv.CountedNodes[tier]++
			}
		}
	}
	return inv, nil
}

// addFree lists a free device on a node, its attributes by qualified
// name and the DeviceClasses it is one of; a device of no one node's pool
// is in no pair.
func (inv *Inventory) addFree(ctx context.Context, snap *report.Snapshot, sl *resourceapi.ResourceSlice, d *resourceapi.Device, tier string) {
	node := ptr.Deref(sl.Spec.NodeName, "")
	if node == "" {
		return
	}
	classes := map[string]bool{}
	for name := range snap.Classes {
		if snap.InClass(ctx, name, sl, d) {
			classes[name] = true
		}
	}
	attrs := map[string]string{}
	for name, a := range d.Attributes {
		v, ok := devices.AttributeString(a)
		if !ok {
			continue
		}
		q := string(name)
		if !strings.Contains(q, "/") {
			q = sl.Spec.Driver + "/" + q
		}
		attrs[q] = v
	}
	inv.Free = append(inv.Free, FreeDevice{Driver: sl.Spec.Driver, Node: node, Tier: tier, Attributes: attrs, Classes: classes})
}

// addToGroups counts a free device of tier in the groups of each of its
// attributes with a plain value, on its pool's node.
func (inv Inventory) addToGroups(tier, pool string, d *resourceapi.Device) {
	for name, a := range d.Attributes {
		v, ok := devices.AttributeString(a)
		if !ok {
			continue
		}
		if inv.Groups[tier] == nil {
			inv.Groups[tier] = map[string]map[string]int{}
		}
		if inv.Groups[tier][string(name)] == nil {
			inv.Groups[tier][string(name)] = map[string]int{}
		}
		inv.Groups[tier][string(name)][pool+"/"+v]++
	}
}

func (inv Inventory) meets(req Requirements) error {
	var missing []string
	for _, t := range req.Tiers {
		if inv.Devices[t] == 0 {
			missing = append(missing, fmt.Sprintf("%s GPUs published through DRA", t))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(req.Devices)) {
		if n := req.Devices[t]; inv.Devices[t] < n {
			missing = append(missing, fmt.Sprintf("%d free %s GPUs published through DRA (it has %d)", n, t, inv.Devices[t]))
		}
	}
	for _, t := range req.CountedTiers {
		if inv.Counted[t] == 0 {
			missing = append(missing, fmt.Sprintf("%s GPUs counted through the device-plugin API (%s)", t, gpu.ExtendedResource))
		}
	}
	for _, t := range req.PartitionedTiers {
		if inv.Partitioned[t] == 0 {
			missing = append(missing, fmt.Sprintf("%s GPUs published with MIG partitions (partitioning: mig)", t))
		}
	}
	for _, t := range req.PlainTiers {
		if inv.Plain[t] == 0 {
			missing = append(missing, fmt.Sprintf("%s GPUs that are neither partitioned, shared nor fabric-attached", t))
		}
	}
	for _, t := range req.SharedTiers {
		if inv.Shared[t] == 0 {
			missing = append(missing, fmt.Sprintf("%s GPUs shared by memory (sharing: memory)", t))
		}
	}
	for _, t := range req.AttachedTiers {
		if inv.Attached[t] == 0 {
			missing = append(missing, fmt.Sprintf("%s GPUs attached through a fabric, with binding conditions (attach: fabric)", t))
		}
	}
	for _, l := range req.NodeLabels {
		if !inv.NodeLabels[l] {
			missing = append(missing, "a node labelled "+l)
		}
	}
	for _, t := range req.TimeSlicedTiers {
		// A claim cannot name the GPU another claim got: with two such
		// GPUs, the second kind would go to the other one.
		if n := inv.TimeSliced[t]; n != 1 {
			missing = append(missing, fmt.Sprintf("exactly one free %s GPU offering MIG devices and time-sliced shares that exclude each other (partitioning: mig and timeSlices, with the DRADeviceCompatibilityGroups gate, as lab/examples/frontier.yaml has it; it has %d)", t, n))
		}
	}
	for _, t := range req.OverheadTiers {
		if inv.Overhead[t] == 0 {
			missing = append(missing, fmt.Sprintf("%s GPUs that add node resources to a pod, such as a host-memory overhead (nodeAllocatableResources: the DRANodeAllocatableResources gate, as lab/examples/frontier.yaml has it)", t))
		}
	}
	for _, t := range req.UntaintedTiers {
		if n := inv.Tainted[t]; n > 0 {
			missing = append(missing, fmt.Sprintf("no tainted %s GPU (it has %d: an All claim with admin access takes a node's every one, and the device taint manager evicts its pod from a NoExecute one)", t, n))
		}
	}
	for _, d := range req.Drivers {
		if inv.Drivers[d] == 0 {
			missing = append(missing, fmt.Sprintf("devices of the driver %s", d))
		}
	}
	for _, n := range req.Nodes {
		if got := inv.nodesWith(n.Tier, n.Devices); got < n.count() {
			missing = append(missing, fmt.Sprintf("%d nodes with %d free %s GPUs each, as a claim's devices are on one node (it has %d: %s)", n.count(), n.Devices, n.Tier, got, perNode(inv.FreeOnNode[n.Tier])))
		}
	}
	for _, p := range req.Pairs {
		pairs := inv.PairsOf(&p.Pairs)
		gpus := 0
		for _, d := range inv.Free {
			if d.Tier == p.Tier {
				gpus++
			}
		}
		switch {
		case pairs == 0:
			missing = append(missing, fmt.Sprintf("a free %s GPU and a free %s device agreeing on %s on one node", p.Tier, p.Class, pairAttributes(&p.Pairs)))
		case p.Spare && gpus <= pairs:
			missing = append(missing, fmt.Sprintf("more free %s GPUs than the %d that have a free %s device agreeing on %s beside them (it has %d)", p.Tier, pairs, p.Class, pairAttributes(&p.Pairs), gpus))
		}
	}
	if d := req.Domains; d != nil {
		domains := inv.domains(d.Label, d.Tier)
		if len(domains) != d.Count || slices.ContainsFunc(slices.Collect(maps.Values(domains)), func(n int) bool { return n != d.Devices }) {
			missing = append(missing, fmt.Sprintf("exactly %d domains of node label %s with exactly %d free %s GPUs each (it has %s)", d.Count, d.Label, d.Devices, d.Tier, perNode(domains)))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: it needs %s; the cluster has DRA GPUs %v (partitioned %v, shared %v, fabric-attached %v) and counted GPUs %v",
			ErrUnmet, strings.Join(missing, ", "), inv.Devices, inv.Partitioned, inv.Shared, inv.Attached, inv.Counted)
	}
	return nil
}

// pairAttributes names the attributes a pair agrees on.
func pairAttributes(p *Pairs) string {
	s := p.Attribute
	if p.ClassAttribute != "" {
		s += " (" + p.ClassAttribute + " on the other)"
	}
	if len(p.Except) > 0 {
		s += fmt.Sprintf(", other than %v", p.Except)
	}
	return s
}

// nodesWith counts the nodes with at least n free DRA GPUs of tier.
func (inv Inventory) nodesWith(tier string, n int) int {
	count := 0
	for _, free := range inv.FreeOnNode[tier] {
		if free >= n {
			count++
		}
	}
	return count
}

// domains counts the free DRA GPUs of tier by the value of a node label;
// a node without the label is in no domain.
func (inv Inventory) domains(label, tier string) map[string]int {
	out := map[string]int{}
	for node, free := range inv.FreeOnNode[tier] {
		if v, ok := inv.NodeLabelsOf[node][label]; ok {
			out[v] += free
		}
	}
	return out
}

// perNode says a count per node (or domain): "n1 8, n2 2", or "none".
func perNode(counts map[string]int) string {
	var words []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		words = append(words, fmt.Sprintf("%s %d", k, counts[k]))
	}
	if len(words) == 0 {
		return "none"
	}
	return strings.Join(words, ", ")
}

// serves checks that the API server serves each resource.
func (r *Runner) serves(resources []string) error {
	var missing []string
	for _, res := range resources {
		gvr, err := ParseResource(res)
		if err != nil {
			return err
		}
		list, err := r.Client.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("asking the API server for %s: %w", gvr.GroupVersion(), err)
		}
		if list == nil || !slices.ContainsFunc(list.APIResources, func(a metav1.APIResource) bool { return a.Name == gvr.Resource }) {
			missing = append(missing, res)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: the API server does not serve %s: its feature gates and runtime config must switch them on (a dralab lab: featureGates and runtimeConfig, as lab/examples/workloads.yaml does)",
			ErrUnmet, strings.Join(missing, ", "))
	}
	return nil
}

type run struct {
	*Runner
	s   *Scenario
	ns  string
	inv Inventory
	// clusterObjects are cluster-scoped objects the scenario created.
	clusterObjects []*unstructured.Unstructured
	// gone are pods the last action deleted or had evicted.
	gone []string
	// failed are the GPUs the scenario failed, as node/device.
	failed [][2]string
}

func (r *run) act(ctx context.Context, st Step) error {
	r.gone = nil
	switch {
	case len(st.Apply) > 0:
		for _, f := range st.Apply {
			if err := r.applyFile(ctx, f); err != nil {
				return err
			}
		}
	case st.CreatePods != nil:
		return r.createPods(ctx, st.CreatePods)
	case st.DeletePods != nil:
		return r.deletePods(ctx, st.DeletePods)
	case st.DeleteGroups != nil:
		return r.deleteGroups(ctx, st.DeleteGroups)
	case st.TaintAllocated != nil:
		return r.taintAllocated(ctx, st.TaintAllocated)
	case st.FailGPU != nil:
		return r.failGPU(ctx, st.FailGPU)
	case st.HealGPU != nil:
		return r.healGPUs(ctx)
	}
	return nil
}

// failGPU fails the GPUs some pods hold and waits until each pod's status
// reports its device Unhealthy and each device carries the XID's taint:
// the pods' status is watched from before the failure, as an evicted pod
// may be gone soon after.
func (r *run) failGPU(ctx context.Context, f *FailGPU) error {
	xid := f.XID
	if xid == 0 {
		xid = gpu.DefaultXID
	}
	fault, isFault := gpu.LookupXID(xid).Fault()
	rows, err := report.Allocations(ctx, r.Client, r.ns)
	if err != nil {
		return err
	}
	var held []report.Row
	for _, row := range rows {
		if ok, _ := path.Match(f.Pods, row.Pod); ok && row.Device != "" && row.Driver == gpu.DriverName {
			held = append(held, row)
		}
	}
	if len(held) == 0 {
		return fmt.Errorf("failGPU: no pod matching %s holds a GPU of %s", f.Pods, gpu.DriverName)
	}
	list, err := r.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	w, err := r.Client.CoreV1().Pods(r.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	for _, row := range held {
		if err := r.GPUFaults.FailGPU(ctx, row.Node, row.Device, xid); err != nil {
			return fmt.Errorf("failGPU %s/%s: %w", row.Node, row.Device, err)
		}
		r.failed = append(r.failed, [2]string{row.Node, row.Device})
	}
	if !isFault {
		return nil
	}
	// Each pod's status must say Unhealthy while it still exists.
	unhealthy := map[string]bool{}
	for _, row := range held {
		unhealthy[row.Pod] = false
	}
	deadline := time.After(r.StepTimeout)
	for slices.Contains(slices.Collect(maps.Values(unhealthy)), false) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("failGPU: the watch of the pods ended")
			}
			p, isPod := ev.Object.(*v1.Pod)
			if !isPod {
				continue
			}
			if _, ok := unhealthy[p.Name]; !ok {
				continue
			}
			for _, c := range p.Status.ContainerStatuses {
				for _, rs := range c.AllocatedResourcesStatus {
					for _, h := range rs.Resources {
						if h.Health == v1.ResourceHealthStatusUnhealthy {
							unhealthy[p.Name] = true
						}
					}
				}
			}
		case <-deadline:
			return fmt.Errorf("failGPU: within %v the status of these pods did not report their GPU Unhealthy: %v", r.StepTimeout, unhealthy)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// And each device carries the fault's taint.
	want := fault.Taint.Key + "=" + fault.Taint.Value + ":" + string(fault.Taint.Effect)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, r.StepTimeout, true, func(ctx context.Context) (bool, error) {
		snap, err := report.Read(ctx, r.Client, r.ns)
		if err != nil {
			return false, nil
		}
		for _, row := range held {
			if !slices.Contains(snap.DeviceTaints(row.Driver, row.Pool, row.Device), want) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("failGPU: the failed devices do not carry the taint %s: %w", want, err)
	}
	if fault.Taint.Effect == resourceapi.DeviceTaintEffectNoExecute {
		for _, row := range held {
			r.gone = append(r.gone, row.Pod)
		}
	}
	return nil
}

// healGPUs heals every GPU the scenario failed.
func (r *run) healGPUs(ctx context.Context) error {
	var errs []error
	for _, g := range r.failed {
		if err := r.GPUFaults.HealGPU(ctx, g[0], g[1]); err != nil {
			errs = append(errs, fmt.Errorf("healGPU %s/%s: %w", g[0], g[1], err))
		}
	}
	r.failed = nil
	return errors.Join(errs...)
}

// objects decodes a manifest file of the scenario.
func (r *run) objects(file string) ([]*unstructured.Unstructured, error) {
	data, err := r.s.File(file)
	if err != nil {
		return nil, err
	}
	return kubeapply.Decode(r.s.Source(file), data)
}

func (r *run) applyFile(ctx context.Context, file string) error {
	objs, err := r.objects(file)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := r.apply(ctx, obj); err != nil {
			return fmt.Errorf("%s: %s %s: %w", r.s.Source(file), obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// apply creates an object of the scenario; cluster-scoped ones are
// remembered for cleanup.
func (r *run) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	// A cluster-scoped object is the cluster's, not the namespace's: the
	// run labels what it creates, applies over only what carries its
	// label (an interrupted run's), and deletes only that.
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy] = fieldManager
	obj.SetLabels(labels)
	a := kubeapply.Applier{Dynamic: r.Dynamic, Mapper: r.Mapper, FieldManager: fieldManager, RefuseDropped: true,
		Owned: func(existing *unstructured.Unstructured) bool {
			return existing.GetLabels()[LabelManagedBy] == fieldManager
		}}
	clusterScoped, err := a.Apply(ctx, obj, r.ns)
	var dropped *kubeapply.DroppedError
	if clusterScoped && (err == nil || errors.As(err, &dropped)) {
		r.clusterObjects = append(r.clusterObjects, obj)
	}
	// A field the cluster's API server drops is a feature the cluster
	// does not have: the scenario cannot run here, which is not its
	// failure.
	if errors.As(err, &dropped) {
		return fmt.Errorf("%w: %w", ErrUnmet, dropped)
	}
	return err
}

func (r *run) createPods(ctx context.Context, c *CreatePods) error {
	var pods []*unstructured.Unstructured
	for _, f := range c.Files() {
		objs, err := r.objects(f)
		if err != nil {
			return err
		}
		if len(objs) != 1 || objs[0].GetKind() != "Pod" {
			return fmt.Errorf("%s: createPods needs a file with exactly one Pod", r.s.Source(f))
		}
		pods = append(pods, objs[0])
	}
	n := r.inv.Resolve(&c.Replicas)
	if c.Group != "" {
		return r.createGroups(ctx, c, pods, n)
	}
	for i := range n {
		for j, manifest := range pods {
			pod := manifest.DeepCopy()
			pod.SetName(fmt.Sprintf("%s-%d", manifest.GetName(), i))
			if err := r.apply(ctx, pod); err != nil {
				return fmt.Errorf("%s: pod %s: %w", r.s.Source(c.Files()[j]), pod.GetName(), err)
			}
			// One at a time: the order of allocation is the order of creation.
			if err := r.waitScheduled(ctx, pod.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

// createGroups makes each pod manifest's n copies a PodGroup of the group
// manifest, named as the manifest's pod, and creates every group's pods at
// once.
func (r *run) createGroups(ctx context.Context, c *CreatePods, pods []*unstructured.Unstructured, n int) error {
	objs, err := r.objects(c.Group)
	if err != nil {
		return err
	}
	if len(objs) != 1 || objs[0].GetKind() != "PodGroup" {
		return fmt.Errorf("%s: createPods' group needs a file with exactly one PodGroup", r.s.Source(c.Group))
	}
	var names []string
	for j, manifest := range pods {
		group := objs[0].DeepCopy()
		group.SetName(manifest.GetName())
		if gang, ok, _ := unstructured.NestedMap(group.Object, "spec", "schedulingPolicy", "gang"); ok {
			if _, has := gang["minCount"]; !has {
				if err := unstructured.SetNestedField(group.Object, int64(n), "spec", "schedulingPolicy", "gang", "minCount"); err != nil {
					return err
				}
			}
		}
		if err := r.apply(ctx, group); err != nil {
			return fmt.Errorf("%s: PodGroup %s: %w", r.s.Source(c.Group), group.GetName(), err)
		}
		for i := range n {
			pod := manifest.DeepCopy()
			pod.SetName(fmt.Sprintf("%s-%d", manifest.GetName(), i))
			if err := unstructured.SetNestedField(pod.Object, group.GetName(), "spec", "schedulingGroup", "podGroupName"); err != nil {
				return err
			}
			if err := r.apply(ctx, pod); err != nil {
				return fmt.Errorf("%s: pod %s: %w", r.s.Source(c.Files()[j]), pod.GetName(), err)
			}
			names = append(names, pod.GetName())
		}
	}
	for _, name := range names {
		if err := r.waitScheduled(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) waitScheduled(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, r.StepTimeout, true, func(ctx context.Context) (bool, error) {
		pod, err := r.Client.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return pod.Spec.NodeName != "" || report.Unschedulable(pod), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s was neither scheduled nor found unschedulable: %w", name, err)
	}
	return nil
}

func (r *run) deletePods(ctx context.Context, d *DeletePods) error {
	rows, err := report.Allocations(ctx, r.Client, r.ns)
	if err != nil {
		return err
	}
	want, deleted := -1, 0
	if d.Count != nil {
		want = r.inv.Resolve(d.Count)
	}
	for _, o := range Outcomes(rows) {
		if deleted == want {
			break
		}
		if ok, _ := path.Match(d.Pods, o.Name); !ok || (d.Tier != "" && podTier(o) != d.Tier) || (d.Phase != "" && o.phase() != d.Phase) {
			continue
		}
		if err := r.Client.CoreV1().Pods(r.ns).Delete(ctx, o.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
			return err
		}
		r.gone = append(r.gone, o.Name)
		deleted++
	}
	if deleted < want || (want < 0 && deleted == 0) {
		return fmt.Errorf("deletePods: found %d of %s pods matching %s (tier %q, phase %q) to delete", deleted, d.Count.String(), d.Pods, d.Tier, d.Phase)
	}
	return nil
}

// deleteGroups deletes the PodGroups matching a pattern and their pods.
func (r *run) deleteGroups(ctx context.Context, d *DeleteGroups) error {
	groups, err := r.Client.SchedulingV1beta1().PodGroups(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("deleteGroups: %w", err)
	}
	pods, err := r.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	deleted := 0
	for _, g := range groups.Items {
		if ok, _ := path.Match(d.Groups, g.Name); !ok {
			continue
		}
		for _, p := range pods.Items {
			if report.GroupOf(&p) != g.Name {
				continue
			}
			if err := r.Client.CoreV1().Pods(r.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			r.gone = append(r.gone, p.Name)
		}
		if err := r.Client.SchedulingV1beta1().PodGroups(r.ns).Delete(ctx, g.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		deleted++
	}
	if deleted == 0 {
		return fmt.Errorf("deleteGroups: no PodGroup matches %s", d.Groups)
	}
	return nil
}

func (r *run) taintAllocated(ctx context.Context, t *TaintAllocated) error {
	rows, err := report.Allocations(ctx, r.Client, r.ns)
	if err != nil {
		return err
	}
	rows = slices.DeleteFunc(rows, func(row report.Row) bool {
		ok, _ := path.Match(t.Pods, row.Pod)
		return !ok || row.Device == ""
	})
	if len(rows) == 0 {
		return fmt.Errorf("taintAllocated: no pod matching %s holds a device", t.Pods)
	}
	if err := r.onlyOurs(ctx, rows); err != nil {
		return err
	}
	n := 0
	for _, row := range rows {
		rule := &resourceapi.DeviceTaintRule{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceTaintRule"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", r.ns, row.Device, n)},
			Spec: resourceapi.DeviceTaintRuleSpec{
				DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(row.Driver), Pool: ptr.To(row.Pool), Device: ptr.To(row.Device)},
				Taint:          resourceapi.DeviceTaint{Key: t.Key, Value: t.Value, Effect: resourceapi.DeviceTaintEffect(t.Effect)},
			},
		}
		u, err := toUnstructured(rule)
		if err != nil {
			return err
		}
		if err := r.apply(ctx, u); err != nil {
			return fmt.Errorf("DeviceTaintRule for %s: %w", row.DeviceRef(), err)
		}
		if t.Effect == string(resourceapi.DeviceTaintEffectNoExecute) {
			r.gone = append(r.gone, row.Pod)
		}
		n++
	}
	return nil
}

// onlyOurs refuses, before any rule is made, to taint a device that a
// claim of another namespace holds too (a share of it, or admin access):
// on a shared cluster a taint rule on it would keep it from its other
// users, and one with effect NoExecute would evict their pods.
func (r *run) onlyOurs(ctx context.Context, rows []report.Row) error {
	claims, err := r.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("taintAllocated: listing the cluster's claims, to taint no device another holds: %w", err)
	}
	var errs []error
	for _, row := range rows {
		for _, c := range claims.Items {
			if c.Namespace == r.ns || c.Status.Allocation == nil {
				continue
			}
			if slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(res resourceapi.DeviceRequestAllocationResult) bool {
				return res.Driver == row.Driver && res.Pool == row.Pool && res.Device == row.Device
			}) {
				errs = append(errs, fmt.Errorf("taintAllocated: device %s of pod %s is also held by claim %s/%s, which this scenario did not create: a DeviceTaintRule on it would reach that claim's pods; the scenario taints only devices that its own claims alone hold",
					row.DeviceRef(), row.Pod, c.Namespace, c.Name))
			}
		}
	}
	return errors.Join(errs...)
}

func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// await polls until the step's expectations hold on a settled namespace,
// and returns the last allocation table with its mismatches when the step
// timeout passes first.
func (r *run) await(ctx context.Context, st Step) (StepResult, error) {
	res := StepResult{Name: st.Name}
	var lastErr error
	// A step that holds for a while first reaches its outcome, within
	// the step timeout, then keeps it.
	hold := st.holdsFor()
	var heldSince time.Time
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, r.StepTimeout+hold, true, func(ctx context.Context) (bool, error) {
		snap, err := report.Read(ctx, r.Client, r.ns)
		if err != nil {
			lastErr = err
			return false, nil
		}
		rows, err := snap.Rows(ctx)
		if err != nil {
			return false, err
		}
		if slices.ContainsFunc(st.Expect, func(e Expectation) bool { return e.DeviceMetadata }) {
			if err := r.readMetadata(ctx, snap, rows); err != nil {
				lastErr = err
				return false, nil
			}
		}
		res.Rows, res.Snapshot = rows, snap
		res.Expectations = CheckEach(st.Expect, Outcomes(rows), r.inv)
		var groupResults []ExpectationResult
		if len(st.ExpectGroups) > 0 {
			groups, err := r.Client.SchedulingV1beta1().PodGroups(r.ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				lastErr = err
				return false, nil
			}
			groupResults = CheckGroups(st.ExpectGroups, groups.Items, snap, rows, r.inv)
			res.Expectations = append(res.Expectations, groupResults...)
		}
		if !r.settled(ctx, snap) {
			res.Failures = []string{"the namespace did not settle: pods are still starting, terminating or waiting for the scheduler"}
			return r.held(&res, hold, &heldSince), nil
		}
		res.Failures = append(failuresOf(st.Expect, res.Expectations[:len(st.Expect)]), groupFailuresOf(st.ExpectGroups, groupResults)...)
		return r.held(&res, hold, &heldSince), nil
	})
	if hold > 0 && len(res.Failures) == 0 && (heldSince.IsZero() || time.Since(heldSince) < hold) {
		res.Failures = []string{fmt.Sprintf("the expectations held only from %s ago when the step's time (%s) ran out; they must hold for %s", time.Since(heldSince).Round(100*time.Millisecond), r.StepTimeout+hold, hold)}
	}
	if err != nil && !wait.Interrupted(err) {
		return res, err
	}
	if res.Rows == nil && lastErr != nil {
		return res, lastErr
	}
	return res, nil
}

// held tells whether the step is done with res, its latest look: at once
// when its expectations hold and it need not hold them; else once they
// have held for hold since they first did (heldSince), or as soon as one
// stops holding meanwhile, which then fails the step with what moved.
func (r *run) held(res *StepResult, hold time.Duration, heldSince *time.Time) bool {
	ok := len(res.Failures) == 0
	switch {
	case hold == 0:
		return ok
	case heldSince.IsZero():
		if ok {
			*heldSince = time.Now()
		}
		return false
	case !ok:
		for i, f := range res.Failures {
			res.Failures[i] = fmt.Sprintf("held for %s of the %s it must, then: %s", time.Since(*heldSince).Round(100*time.Millisecond), hold, f)
		}
		return true
	}
	return time.Since(*heldSince) >= hold
}

// readMetadata reads the device metadata files each running pod's
// containers printed into their logs and gives them to the pod's rows.
func (r *run) readMetadata(ctx context.Context, snap *report.Snapshot, rows []report.Row) error {
	found := map[string][]report.MetadataDevice{}
	for _, p := range snap.Pods {
		if p.Status.Phase != v1.PodRunning {
			continue
		}
		for _, c := range p.Spec.Containers {
			log, err := r.Client.CoreV1().Pods(r.ns).GetLogs(p.Name, &v1.PodLogOptions{Container: c.Name}).DoRaw(ctx)
			if err != nil {
				return fmt.Errorf("reading the log of pod %s, container %s: %w", p.Name, c.Name, err)
			}
			devs, err := snap.ParseMetadata(string(log))
			if err != nil {
				return fmt.Errorf("pod %s, container %s: %w", p.Name, c.Name, err)
			}
			found[p.Name] = append(found[p.Name], devs...)
		}
	}
	for i := range rows {
		rows[i].Metadata = found[rows[i].Pod]
	}
	return nil
}

// settled: every pod runs or was found unschedulable, none is
// terminating, the pods an action removed are gone, and every Deployment
// has all its pods.
func (r *run) settled(ctx context.Context, snap *report.Snapshot) bool {
	for _, name := range r.gone {
		for _, p := range snap.Pods {
			if p.Name == name {
				return false
			}
		}
	}
	for _, p := range snap.Pods {
		if p.DeletionTimestamp != nil {
			return false
		}
		if p.Status.Phase != v1.PodRunning && !(p.Spec.NodeName == "" && report.Unschedulable(&p)) {
			return false
		}
	}
	deployments, err := r.Client.AppsV1().Deployments(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, d := range deployments.Items {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			return false
		}
		n := 0
		for _, p := range snap.Pods {
			if sel.Matches(labels.Set(p.Labels)) {
				n++
			}
		}
		if n != int(ptr.Deref(d.Spec.Replicas, 1)) {
			return false
		}
	}
	return true
}

// cleanup deletes the cluster-scoped objects and the namespace, and waits
// until the namespace holds no pod and no claim: then every device it held
// is free for the next scenario, even while the namespace itself is still
// terminating.
func (r *run) cleanup(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	var errs []error
	// A GPU the scenario failed is healed, whatever happened.
	if err := r.healGPUs(ctx); err != nil {
		errs = append(errs, err)
	}
	for _, obj := range r.clusterObjects {
		gvk := obj.GroupVersionKind()
		mapping, err := r.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err == nil {
			err = r.Dynamic.Resource(mapping.Resource).Delete(ctx, obj.GetName(), metav1.DeleteOptions{})
		}
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s %s: %w", obj.GetKind(), obj.GetName(), err))
		}
	}
	if r.KeepNamespace {
		logger.Info("Keeping the scenario's namespace", "namespace", r.ns)
		return errors.Join(errs...)
	}
	// The namespace controller gets there too, but deleting the pods
	// directly frees their devices seconds sooner. Not with a grace period
	// of 0: such a pod leaves the API before its kubelet has unprepared
	// its claims, so its devices would look free while their driver still
	// holds them, and whoever uses the lab next (another scenario, the
	// conformance sanity layer) would be refused them. With a grace period
	// the kubelet removes the pod once it has unprepared its claims.
	graceful := metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}
	if err := r.Client.CoreV1().Pods(r.ns).DeleteCollection(ctx, graceful, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := r.Client.ResourceV1().ResourceClaims(r.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	if err := r.Client.CoreV1().Namespaces().Delete(ctx, r.ns, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := r.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		claims, err := r.Client.ResourceV1().ResourceClaims(r.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		return len(pods.Items) == 0 && len(claims.Items) == 0, nil
	})
	if err != nil {
		errs = append(errs, fmt.Errorf("namespace %s still holds pods or claims: %w", r.ns, err))
	}
	return errors.Join(errs...)
}
