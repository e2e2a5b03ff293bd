package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// The fake cluster's one node and its devices.
const (
	fakeDriver = "gpu.example.com"
	fakeNode   = "node-a"
)

// fakeDevices are the devices of a fake node, gpu-0 to gpu-<n-1>; with
// attributes, each has a unique index and uuid and shares its PCIe root
// with seven others, as GPUs under one switch do.
func fakeDevices(n int, attributes bool) []resourceapi.Device {
	var out []resourceapi.Device
	for i := range n {
		d := resourceapi.Device{Name: fmt.Sprintf("gpu-%d", i)}
		if attributes {
			d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index":                           {IntValue: ptr.To(int64(i))},
				"uuid":                            {StringValue: ptr.To(fmt.Sprintf("GPU-%04d", i))},
				"productName":                     {StringValue: ptr.To("Fake \"GPU\"")},
				"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(fmt.Sprintf("pci0000:%02x", i/8))},
			}
		}
		out = append(out, d)
	}
	return out
}

// What the fake kubelet does with a claim configured with the manifest's
// invalid parameters.
const (
	refuseWithEvent = "event"    // reports FailedPrepareDynamicResources
	refuseSilently  = "silently" // leaves the pod pending, reporting nothing
	prepareAnyway   = "run"      // runs the pod
)

// fakeCluster plays the scheduler and the kubelet of one node with two
// devices on a fake clientset, just enough for the checks' logic: a pod's
// claims get free devices that no DeviceTaintRule selects (every device of
// the node for AllocationMode All), or the pod is marked unschedulable;
// then the pod is bound and runs, unless a claim carries the manifest's
// invalid configuration.
type fakeCluster struct {
	client  *fake.Clientset
	m       *manifest.Manifest
	invalid string
	devices []resourceapi.Device
	// ignoreTaints makes the scheduler allocate tainted devices.
	ignoreTaints atomic.Bool
	// counters are the node's counter sets; ignoreCounters makes the
	// scheduler allocate devices whose counters are used up.
	counters       []resourceapi.CounterSet
	ignoreCounters atomic.Bool
	// oneShareID makes the scheduler give every share of a device the
	// same shareID.
	oneShareID atomic.Bool
	// skip is what the scheduler copies into each result as its
	// skipNodeOperations.
	skip []resourceapi.SkipNodeOperation
	// ignoreBindingConditions makes the scheduler bind a pod before its
	// devices' binding conditions are met.
	ignoreBindingConditions atomic.Bool
	// conditionsAtAllocation, when set, are the conditions a claim's
	// status holds True for each result as it is allocated: met before
	// anyone could see the pod wait.
	conditionsAtAllocation func(resourceapi.DeviceRequestAllocationResult) []string
	// nodeMemory, when set, is the node's allocatable memory, which the
	// scheduler accounts: containers' requests and the perPod memory
	// overhead of their devices (nodeAllocatableResources), recorded in
	// a bound pod's status, and a pod that does not fit is unschedulable
	// for "Insufficient memory". ignoreOverhead makes it leave the
	// devices' overhead out of the fit (it still records it); misaccount,
	// if set, changes what it records.
	nodeMemory     *resource.Quantity
	ignoreOverhead atomic.Bool
	misaccount     func(*v1.NodeAllocatableResourceClaimStatus)
	// why is what the scheduler says of the pod it last found
	// unschedulable.
	why string
	// taints are the node's: a pod that does not tolerate one it may not
	// schedule onto is unschedulable (taintNode).
	taints []v1.Taint

	mu sync.Mutex
	// allocated holds every device ever allocated, driver/pool/device.
	allocated map[string]bool
	// rules are the DeviceTaintRules created, with the devices allocated
	// before each.
	rules []createdRule
	// log is what a proof container's log holds when read for the n-th
	// time (from 1).
	log   func(n int) string
	reads int
	// lastRead is the pod last read.
	lastRead string
	// inject, when set, is what the driver puts in a container given a
	// device, by the device's name: a wrong driver's double.
	inject func(device string) string
	// phase is what a bound pod becomes: Running, or Succeeded for a
	// proof command that has exited.
	phase v1.PodPhase
	// getPodErr, if set, is the API's answer to a read of a pod instead
	// of the pod, when not nil.
	getPodErr func(name string) error
}

type createdRule struct {
	rule            *resourceapi.DeviceTaintRule
	allocatedBefore map[string]bool
}

const testManifest = `apiVersion: conformance.dralab.dev/v1alpha1
kind: DriverManifest
driver: gpu.example.com
deviceClass: gpu.example.com
capabilities: {DRADeviceTaints: true, OpaqueConfig: true}
opaqueConfig:
  valid: {kind: Config, mode: good}
  invalid: {kind: Config, mode: bad}
proof:
  env: {name: GPU_DEVICE_0, pattern: "^gpu-[0-9]+$"}
timeouts: {podRunning: 5s}
`

// newFakeCluster starts a fake cluster of two devices whose kubelet
// handles the invalid configuration as refuse says, and returns a check's
// kit in a namespace of its own.
func newFakeCluster(t *testing.T, refuse string) (*fakeCluster, *kit) {
	t.Helper()
	return newFakeClusterOf(t, refuse, fakeDevices(2, false))
}

// newFakeClusterOf is newFakeCluster with the node's devices and the
// counter sets they consume, published in a slice of their own.
func newFakeClusterOf(t *testing.T, refuse string, devices []resourceapi.Device, counters ...resourceapi.CounterSet) (*fakeCluster, *kit) {
	t.Helper()
	m, err := manifest.Parse("test", []byte(testManifest))
	if err != nil {
		t.Fatal(err)
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: fakeNode + "-gpus"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   fakeDriver,
			Pool:     resourceapi.ResourcePool{Name: fakeNode, ResourceSliceCount: 1},
			NodeName: ptr.To(fakeNode),
		},
	}
	slice.Spec.Devices = devices
	objects := []runtime.Object{slice, &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: fakeDriver}}}
	if len(counters) > 0 {
		slice.Spec.Pool.ResourceSliceCount = 2
		countersSlice := slice.DeepCopy()
		countersSlice.Name = fakeNode + "-counters"
		countersSlice.Spec.Devices, countersSlice.Spec.SharedCounters = nil, counters
		objects = append(objects, countersSlice)
	}
	f := &fakeCluster{
		client:    fake.NewClientset(objects...),
		counters:  counters,
		m:         m,
		invalid:   string(m.OpaqueConfig.Invalid),
		devices:   devices,
		allocated: map[string]bool{},
		// nil: the driver a kubelet runs, which names the device the
		// pod's first claim was allocated.
		phase: v1.PodRunning,
	}
	// The API server serves resource.k8s.io/v1 DeviceTaintRules, as
	// Kubernetes 1.37 does.
	f.client.Resources = []*metav1.APIResourceList{{
		GroupVersion: resourceapi.SchemeGroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "resourceslices"}, {Name: "resourceclaims"}, {Name: "devicetaintrules"}},
	}}
	f.client.PrependReactor("create", "devicetaintrules", func(a clienttesting.Action) (bool, runtime.Object, error) {
		rule := a.(clienttesting.CreateAction).GetObject().(*resourceapi.DeviceTaintRule)
		f.mu.Lock()
		defer f.mu.Unlock()
		before := map[string]bool{}
		for d := range f.allocated {
			before[d] = true
		}
		f.rules = append(f.rules, createdRule{rule: rule.DeepCopy(), allocatedBefore: before})
		return false, nil, nil
	})
	// The API server defaults a request's allocation mode and count.
	f.client.PrependReactor("create", "resourceclaims", func(a clienttesting.Action) (bool, runtime.Object, error) {
		claim := a.(clienttesting.CreateAction).GetObject().(*resourceapi.ResourceClaim)
		for i := range claim.Spec.Devices.Requests {
			if e := claim.Spec.Devices.Requests[i].Exactly; e != nil && e.AllocationMode == "" {
				e.AllocationMode = resourceapi.DeviceAllocationModeExactCount
			}
			if e := claim.Spec.Devices.Requests[i].Exactly; e != nil && e.AllocationMode == resourceapi.DeviceAllocationModeExactCount && e.Count == 0 {
				e.Count = 1
			}
		}
		return false, nil, nil
	})
	// The proof container's environment names its device.
	f.client.PrependReactor("get", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if a.GetSubresource() != "log" {
			g, ok := a.(clienttesting.GetAction)
			if ok {
				// The fake's GetLogs names no pod: a proof reads the
				// pod it then reads the log of.
				f.lastRead = g.GetName()
			}
			if ok && f.getPodErr != nil {
				if err := f.getPodErr(g.GetName()); err != nil {
					return true, nil, err
				}
			}
			return false, nil, nil
		}
		f.reads++
		if f.log == nil {
			d := f.podDevice(a.GetNamespace(), f.lastRead)
			if f.inject != nil {
				d = f.inject(d)
			}
			return true, &runtime.Unknown{Raw: []byte("PATH=/bin\nGPU_DEVICE_0=" + d + "\n")}, nil
		}
		return true, &runtime.Unknown{Raw: []byte(f.log(f.reads))}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.run(ctx, refuse)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	k := &kit{suite: &suite{m: m}, client: f.client, ns: "conformance-test"}
	if err := k.createNamespace(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	return f, k
}

func (f *fakeCluster) run(ctx context.Context, refuse string) {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			f.serviceAccounts(ctx)
			f.schedule(ctx, refuse)
		}
	}
}

// serviceAccounts gives each namespace its default ServiceAccount, as the
// controller manager does.
func (f *fakeCluster) serviceAccounts(ctx context.Context) {
	namespaces, err := f.client.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for _, ns := range namespaces.Items {
		sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}}
		_, _ = f.client.CoreV1().ServiceAccounts(ns.Name).Create(ctx, sa, metav1.CreateOptions{})
	}
}

// schedule binds the pods whose claims it can allocate.
func (f *fakeCluster) schedule(ctx context.Context, refuse string) {
	pods, err := f.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Spec.NodeName != "" {
			continue
		}
		f.mu.Lock()
		taints := f.taints
		f.mu.Unlock()
		// TaintToleration filters before DynamicResources.
		if t, untolerated := corev1helpers.FindMatchingUntoleratedTaint(klog.Background(), taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
			return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
		}, false); untolerated {
			pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable,
				Message: fmt.Sprintf("0/1 nodes are available: 1 node(s) had untolerated taint {%s: %s}.", t.Key, t.Value)}}
			_, _ = f.client.CoreV1().Pods(pod.Namespace).Update(ctx, pod, metav1.UpdateOptions{})
			continue
		}
		f.why = "0/1 nodes are available: cannot allocate all claims."
		if !f.allocate(ctx, pod) {
			pod.Status.Conditions = []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionFalse, Reason: v1.PodReasonUnschedulable, Message: f.why}}
			_, _ = f.client.CoreV1().Pods(pod.Namespace).Update(ctx, pod, metav1.UpdateOptions{})
			continue
		}
		// PreBind: the pod waits until its devices' binding conditions are
		// True in its claims' status.
		if !f.ignoreBindingConditions.Load() && !f.bindingConditionsMet(ctx, pod) {
			continue
		}
		pod.Spec.NodeName = fakeNode
		f.mu.Lock()
		pod.Status.Phase = f.phase
		f.mu.Unlock()
		if f.nodeMemory != nil {
			pod.Status.NodeAllocatableResourceClaimStatuses = f.accounting(ctx, pod)
		}
		if f.configuredInvalid(ctx, pod) {
			switch refuse {
			case refuseWithEvent:
				pod.Status.Phase = v1.PodPending
				_, _ = f.client.CoreV1().Events(pod.Namespace).Create(ctx, &v1.Event{
					ObjectMeta:     metav1.ObjectMeta{Name: pod.Name + ".prepare", Namespace: pod.Namespace},
					InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
					Reason:         "FailedPrepareDynamicResources",
					Message:        "Failed to prepare dynamic resources: mode: Unsupported value: \"bad\"",
					Type:           v1.EventTypeWarning,
				}, metav1.CreateOptions{})
			case refuseSilently:
				pod.Status.Phase = v1.PodPending
			}
		}
		_, _ = f.client.CoreV1().Pods(pod.Namespace).Update(ctx, pod, metav1.UpdateOptions{})
	}
}

// allocate allocates the pod's claims, all or none.
func (f *fakeCluster) allocate(ctx context.Context, pod *v1.Pod) bool {
	claims, err := f.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	// Admin access takes a device in use and leaves it in use; a device
	// allowing multiple allocations is held by none of them.
	held := map[string]bool{}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, c := range claims.Items {
		if c.Status.Allocation != nil {
			for _, r := range c.Status.Allocation.Devices.Results {
				held[r.Pool+"/"+r.Device] = !ptr.Deref(r.AdminAccess, false) && r.ShareID == nil
				if !ptr.Deref(r.AdminAccess, false) {
					results = append(results, r)
				}
			}
		}
	}
	fits := func(name string, req resourceapi.DeviceRequest) bool { return f.fits(name, req, results) }
	rules, err := f.client.ResourceV1().DeviceTaintRules().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	tainted := func(device string) bool {
		if f.ignoreTaints.Load() {
			return false
		}
		for _, r := range rules.Items {
			sel := r.Spec.DeviceSelector
			if sel == nil || (sel.Driver == nil || *sel.Driver == fakeDriver) && (sel.Pool == nil || *sel.Pool == fakeNode) && (sel.Device == nil || *sel.Device == device) {
				return true
			}
		}
		return false
	}
	var updates []*resourceapi.ResourceClaim
	for _, pc := range pod.Spec.ResourceClaims {
		claim, err := f.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			return false
		}
		if claim.Status.Allocation != nil {
			continue
		}
		req := claim.Spec.Devices.Requests[0]
		all := req.Exactly != nil && req.Exactly.AllocationMode == resourceapi.DeviceAllocationModeAll
		admin := req.Exactly != nil && ptr.Deref(req.Exactly.AdminAccess, false)
		selected, err := f.selected(ctx, req)
		if err != nil {
			return false
		}
		var results []resourceapi.DeviceRequestAllocationResult
		for _, d := range selected {
			usable := (admin || !held[fakeNode+"/"+d] && fits(d, req)) && !tainted(d)
			if all && !usable {
				return false
			}
			if usable && (all || len(results) == 0) {
				results = append(results, f.result(req, d))
				held[fakeNode+"/"+d] = !admin && results[len(results)-1].ShareID == nil
			}
		}
		// The allocator's limit: "adding 40 devices exceeds the claim
		// limit of 32".
		if len(results) == 0 || len(results) > resourceapi.AllocationResultsMaxSize {
			return false
		}
		claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: results}}
		claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
		updates = append(updates, claim)
	}
	if f.nodeMemory != nil && !f.memoryFits(ctx, pod, updates) {
		f.why = "0/1 nodes are available: 1 Insufficient memory."
		return false
	}
	for _, c := range updates {
		if f.conditionsAtAllocation != nil {
			c.Status.Devices = deviceStatuses(c.Status.Allocation.Devices.Results, f.conditionsAtAllocation)
		}
		if _, err := f.client.ResourceV1().ResourceClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{}); err != nil {
			return false
		}
		f.mu.Lock()
		for _, r := range c.Status.Allocation.Devices.Results {
			f.allocated[fmt.Sprintf("%s/%s/%s", r.Driver, r.Pool, r.Device)] = true
		}
		f.mu.Unlock()
	}
	return true
}

// overheadOf is the perPod memory overhead the devices of a claim's
// results declare.
func (f *fakeCluster) overheadOf(results []resourceapi.DeviceRequestAllocationResult) resource.Quantity {
	var sum resource.Quantity
	for _, r := range results {
		if o := f.device(r.Device).NodeAllocatableResources[v1.ResourceMemory].Overhead; o != nil && o.PerPod != nil {
			sum.Add(*o.PerPod)
		}
	}
	return sum
}

// memoryFits says whether the pod, with the claims about to be allocated
// and those it already has, fits the node's memory beside the bound pods.
func (f *fakeCluster) memoryFits(ctx context.Context, pod *v1.Pod, updates []*resourceapi.ResourceClaim) bool {
	need := pod.Spec.Containers[0].Resources.Requests[v1.ResourceMemory].DeepCopy()
	for _, c := range updates {
		if !f.ignoreOverhead.Load() {
			q := f.overheadOf(c.Status.Allocation.Devices.Results)
			need.Add(q)
		}
	}
	pods, err := f.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	free := f.nodeMemory.DeepCopy()
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Name == pod.Name && p.Namespace == pod.Namespace {
			continue
		}
		free.Sub(p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory])
		for _, s := range p.Status.NodeAllocatableResourceClaimStatuses {
			for _, o := range s.Overhead {
				if o.PerPod != nil {
					free.Sub(*o.PerPod)
				}
			}
		}
	}
	return need.Cmp(free) <= 0
}

// accounting is what the scheduler records of a bound pod's claims' node
// resources: each claim's devices' memory overhead per pod.
func (f *fakeCluster) accounting(ctx context.Context, pod *v1.Pod) []v1.NodeAllocatableResourceClaimStatus {
	var out []v1.NodeAllocatableResourceClaimStatus
	for _, pc := range pod.Spec.ResourceClaims {
		claim, err := f.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
		if err != nil || claim.Status.Allocation == nil {
			continue
		}
		q := f.overheadOf(claim.Status.Allocation.Devices.Results)
		if q.Sign() == 0 {
			continue
		}
		s := v1.NodeAllocatableResourceClaimStatus{ResourceClaimName: pc.Name, Containers: []string{pod.Spec.Containers[0].Name},
			Overhead: []v1.NodeAllocatableOverheadResources{{Name: v1.ResourceMemory, PerPod: &q}}}
		if f.misaccount != nil {
			f.misaccount(&s)
		}
		out = append(out, s)
	}
	return out
}

// device returns the fake node's device of that name.
func (f *fakeCluster) device(name string) resourceapi.Device {
	for _, d := range f.devices {
		if d.Name == name {
			return d
		}
	}
	panic("no device " + name)
}

// fits says whether the counters and, for a shared device, the capacity
// that results leave hold device name for req. As Kubernetes' allocator
// does, it charges each allocated device's counters once, however many
// shares of it results hold, and a further share of a shared device in
// use is not charged again.
func (f *fakeCluster) fits(name string, req resourceapi.DeviceRequest, results []resourceapi.DeviceRequestAllocationResult) bool {
	d := f.device(name)
	shared := ptr.Deref(d.AllowMultipleAllocations, false)
	inUse := slices.ContainsFunc(results, func(r resourceapi.DeviceRequestAllocationResult) bool { return r.Device == name })
	if !f.ignoreCounters.Load() && len(d.ConsumesCounters) > 0 && !(shared && inUse) {
		left := map[string]map[string]int64{}
		for _, set := range f.counters {
			left[set.Name] = map[string]int64{}
			for n, c := range set.Counters {
				left[set.Name][n] = c.Value.Value()
			}
		}
		charged := map[string]bool{}
		for _, r := range results {
			if charged[r.Device] {
				continue
			}
			charged[r.Device] = true
			for _, c := range f.device(r.Device).ConsumesCounters {
				for n, v := range c.Counters {
					left[c.CounterSet][n] -= v.Value.Value()
				}
			}
		}
		for _, c := range d.ConsumesCounters {
			for n, v := range c.Counters {
				if left[c.CounterSet][n] < v.Value.Value() {
					return false
				}
			}
		}
	}
	if !shared {
		return true
	}
	share := f.share(req, d)
	if share == nil {
		return false
	}
	for n, want := range share {
		used := want.Value()
		for _, r := range results {
			if r.Device == name {
				used += ptr.To(r.ConsumedCapacity[n]).Value()
			}
		}
		if used > ptr.To(d.Capacity[n].Value).Value() {
			return false
		}
	}
	return true
}

// share is what one share of a shared device d consumes for req, as the
// allocator reckons it: of each capacity of d, what req asks, else the
// capacity's default request, else all of it. Nil when req asks a capacity
// d lacks.
func (f *fakeCluster) share(req resourceapi.DeviceRequest, d resourceapi.Device) map[resourceapi.QualifiedName]resource.Quantity {
	var requests map[resourceapi.QualifiedName]resource.Quantity
	if req.Exactly != nil && req.Exactly.Capacity != nil {
		requests = req.Exactly.Capacity.Requests
	}
	for n := range requests {
		if _, ok := d.Capacity[n]; !ok {
			return nil
		}
	}
	out := map[resourceapi.QualifiedName]resource.Quantity{}
	for n, c := range d.Capacity {
		switch q, ok := requests[n]; {
		case ok:
			out[n] = q
		case c.RequestPolicy != nil && c.RequestPolicy.Default != nil:
			out[n] = *c.RequestPolicy.Default
		default:
			out[n] = c.Value
		}
	}
	return out
}

// result allocates device name for req: a share of a device allowing
// multiple allocations, consuming what req asks.
func (f *fakeCluster) result(req resourceapi.DeviceRequest, name string) resourceapi.DeviceRequestAllocationResult {
	r := resourceapi.DeviceRequestAllocationResult{Request: req.Name, Driver: fakeDriver, Pool: fakeNode, Device: name}
	if req.Exactly != nil {
		r.AdminAccess = req.Exactly.AdminAccess
	}
	d := f.device(name)
	r.BindingConditions, r.BindingFailureConditions = d.BindingConditions, d.BindingFailureConditions
	r.SkipNodeOperations = f.skip
	if ptr.Deref(d.AllowMultipleAllocations, false) {
		id := types.UID(uuid.NewUUID())
		if f.oneShareID.Load() {
			id = "share-0"
		}
		r.ShareID = &id
		if share := f.share(req, d); len(share) > 0 {
			r.ConsumedCapacity = share
		}
	}
	return r
}

// selected returns the names of the devices a request's CEL selectors
// select, as the allocator evaluates them.
func (f *fakeCluster) selected(ctx context.Context, req resourceapi.DeviceRequest) ([]string, error) {
	var expressions []string
	if req.Exactly != nil {
		for _, s := range req.Exactly.Selectors {
			expressions = append(expressions, s.CEL.Expression)
		}
	}
	selectors, err := devices.CompileSelectors(expressions...)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, d := range f.devices {
		ok, err := selectors.Match(ctx, cel.Device{Driver: fakeDriver, Attributes: d.Attributes, Capacity: d.Capacity})
		if err != nil {
			// The allocator fails the whole claim on a CEL error.
			return nil, err
		}
		if ok {
			out = append(out, d.Name)
		}
	}
	return out, nil
}

// failPodReads makes reads of pods answer err(name) where it is not nil.
func (f *fakeCluster) failPodReads(err func(name string) error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.getPodErr = err
}

// podDevice is the first device allocated to a pod's claims, read from
// the tracker: a reactor may not call the clientset it runs in.
func (f *fakeCluster) podDevice(ns, name string) string {
	obj, err := f.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("pods"), ns, name)
	if err != nil {
		return ""
	}
	pod := obj.(*v1.Pod)
	for _, pc := range pod.Spec.ResourceClaims {
		obj, err := f.client.Tracker().Get(resourceapi.SchemeGroupVersion.WithResource("resourceclaims"), ns, ptr.Deref(pc.ResourceClaimName, ""))
		if err != nil {
			continue
		}
		if c := obj.(*resourceapi.ResourceClaim); c.Status.Allocation != nil && len(c.Status.Allocation.Devices.Results) > 0 {
			return c.Status.Allocation.Devices.Results[0].Device
		}
	}
	return ""
}

// setLog sets what a proof container's log holds at each read.
func (f *fakeCluster) setLog(log func(n int) string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log, f.reads = log, 0
}

// configuredInvalid tells whether one of the pod's claims carries the
// manifest's invalid configuration.
func (f *fakeCluster) configuredInvalid(ctx context.Context, pod *v1.Pod) bool {
	for _, pc := range pod.Spec.ResourceClaims {
		claim, err := f.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			continue
		}
		for _, c := range claim.Spec.Devices.Config {
			if c.Opaque != nil && string(c.Opaque.Parameters.Raw) == f.invalid {
				return true
			}
		}
	}
	return false
}

// createdRules returns the DeviceTaintRules created so far.
func (f *fakeCluster) createdRules() []createdRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]createdRule(nil), f.rules...)
}

// bindingConditionsMet tells whether every binding condition of the pod's
// claims' results is True in the claims' status.
func (f *fakeCluster) bindingConditionsMet(ctx context.Context, pod *v1.Pod) bool {
	for _, pc := range pod.Spec.ResourceClaims {
		claim, err := f.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
		if err != nil || claim.Status.Allocation == nil {
			return false
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			if len(unmetConditions(claim, r)) > 0 {
				return false
			}
		}
	}
	return true
}

// setConditionsAfter plays a driver's controller: delay after a claim is
// allocated a device with binding conditions, it sets each of the types
// the device lists in list (its binding or failure conditions) True in
// the claim's status.
func (f *fakeCluster) setConditionsAfter(t *testing.T, delay time.Duration, list func(resourceapi.DeviceRequestAllocationResult) []string) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() {
		cancel()
		<-done
	})
	go func() {
		defer close(done)
		seen := map[string]time.Time{}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			claims, err := f.client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			for _, c := range claims.Items {
				if c.Status.Allocation == nil || len(c.Status.Devices) > 0 {
					continue
				}
				if _, ok := seen[c.Name]; !ok {
					seen[c.Name] = time.Now()
				}
				if time.Since(seen[c.Name]) < delay {
					continue
				}
				c.Status.Devices = deviceStatuses(c.Status.Allocation.Devices.Results, list)
				_, _ = f.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, &c, metav1.UpdateOptions{})
			}
		}
	}()
}

// deviceStatuses are the status entries of results, each with the
// conditions list names True.
func deviceStatuses(results []resourceapi.DeviceRequestAllocationResult, list func(resourceapi.DeviceRequestAllocationResult) []string) []resourceapi.AllocatedDeviceStatus {
	var out []resourceapi.AllocatedDeviceStatus
	for _, r := range results {
		st := resourceapi.AllocatedDeviceStatus{Driver: r.Driver, Pool: r.Pool, Device: r.Device}
		for _, typ := range list(r) {
			st.Conditions = append(st.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: "Set", LastTransitionTime: metav1.Now()})
		}
		out = append(out, st)
	}
	return out
}

// taintNode creates the node, Ready and carrying taints, which the
// scheduler then holds against pods.
func (f *fakeCluster) taintNode(t *testing.T, taints ...v1.Taint) {
	t.Helper()
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: fakeNode}, Spec: v1.NodeSpec{Taints: taints},
		Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	if _, err := f.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.taints = taints
	f.mu.Unlock()
}
