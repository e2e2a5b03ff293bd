package scenarios

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
)

// A scenario that needs fabric-attached GPUs is unmet, with the reason,
// on a cluster whose GPUs of the tier are all in their nodes.
func TestAttachedTiersAreRequired(t *testing.T) {
	req := Requirements{Tiers: []string{"h100"}, AttachedTiers: []string{"h100"}}
	inv := Inventory{Devices: map[string]int{"h100": 2}, Attached: map[string]int{}}
	err := inv.meets(req)
	if !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "h100 GPUs attached through a fabric, with binding conditions (attach: fabric)") {
		t.Errorf("meets = %v, want unmet for want of fabric-attached H100s", err)
	}
	inv.Attached["h100"] = 1
	if err := inv.meets(req); err != nil {
		t.Errorf("with a fabric-attached H100: %v", err)
	}
}

// Each kind of GPU a scenario may need of a tier is missing, and named,
// where the inventory has none of that kind in the tier, and only there.
func TestTiersOfEachKindAreRequired(t *testing.T) {
	req := Requirements{CountedTiers: []string{"l4"}, PartitionedTiers: []string{"h100"}, PlainTiers: []string{"a100"},
		SharedTiers: []string{"l4"}, OverheadTiers: []string{"h100"}}
	inv := Inventory{Counted: map[string]int{"l4": 2}, Partitioned: map[string]int{"h100": 1}, Plain: map[string]int{},
		Shared: map[string]int{"a100": 1}, Overhead: map[string]int{}}
	err := inv.meets(req)
	if !errors.Is(err, ErrUnmet) {
		t.Fatalf("meets = %v, want unmet", err)
	}
	for _, want := range []string{"a100 GPUs that are neither partitioned, shared nor fabric-attached", "l4 GPUs shared by memory (sharing: memory)",
		"h100 GPUs that add node resources to a pod"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("meets = %v, want it to name %q", err, want)
		}
	}
	for _, met := range []string{"counted through", "MIG partitions"} {
		if strings.Contains(err.Error(), met) {
			t.Errorf("meets = %v, names %q, which the cluster has", err, met)
		}
	}
	inv.Plain["a100"], inv.Shared["l4"], inv.Overhead["h100"] = 1, 3, 1
	if err := inv.meets(req); err != nil {
		t.Errorf("with a GPU of each kind: %v", err)
	}
}

// The inventory counts what the scenario may be given: a GPU that
// gpu:fail tainted, or that a DeviceTaintRule taints, is not free, so a
// scenario never expects one device too many.
func TestInventoryLeavesTaintedGPUsOut(t *testing.T) {
	ctx := context.Background()
	p, err := fakegpu.LookupProfile("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	inv := &fakegpu.Inventory{Node: "n1", Profile: p, Count: 3}
	devs, err := inv.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slice := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: gpu.DriverName, NodeName: ptr.To("n1"), Pool: resourceapi.ResourcePool{Name: "n1", ResourceSliceCount: 1}}}
	for _, d := range devs {
		slice.Spec.Devices = append(slice.Spec.Devices, d.API)
	}
	slice.Spec.Devices[0].Taints = []resourceapi.DeviceTaint{{Key: "dralab.dev/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	rule := &resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: "drain"}, Spec: resourceapi.DeviceTaintRuleSpec{
		DeviceSelector: &resourceapi.DeviceTaintSelector{Pool: ptr.To("n1"), Device: ptr.To(slice.Spec.Devices[1].Name)},
		Taint:          resourceapi.DeviceTaint{Key: "example.com/drain", Effect: resourceapi.DeviceTaintEffectNoExecute}}}
	r := &Runner{Client: fake.NewClientset(slice, rule)}
	got, err := r.inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got.Devices["h100"] != 1 {
		t.Errorf("free H100s = %d, want 1 of 3: one tainted in its slice, one by a DeviceTaintRule", got.Devices["h100"])
	}
}

// The inventory counts as free what the allocator could give: with the
// MIG device that spans a whole H100 taken, the whole GPU is not free,
// though no claim holds it: its counters are spent.
func TestInventoryLeavesGPUsWhoseCountersAreSpentOut(t *testing.T) {
	ctx := context.Background()
	p, err := fakegpu.LookupProfile("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	inv := &fakegpu.Inventory{Node: "n1", Profile: p, Count: 1, Partitioning: fakegpu.PartitioningMIG}
	devs, err := inv.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := inv.CounterSets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pool := resourceapi.ResourcePool{Name: "n1", ResourceSliceCount: 2}
	devices := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-devices"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: gpu.DriverName, NodeName: ptr.To("n1"), Pool: pool}}
	full := ""
	for _, d := range devs {
		devices.Spec.Devices = append(devices.Spec.Devices, d.API)
		if strings.Contains(d.API.Name, "-mig-7g80gb-") {
			full = d.API.Name
		}
	}
	if full == "" {
		t.Fatalf("no 7g.80gb device among %d", len(devs))
	}
	counters := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-counters"}, Spec: resourceapi.ResourceSliceSpec{
		Driver: gpu.DriverName, NodeName: ptr.To("n1"), Pool: pool, SharedCounters: sets}}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "big"}}
	claim.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: gpu.DriverName, Pool: "n1", Device: full}}}}

	idle, err := (&Runner{Client: fake.NewClientset(devices, counters)}).inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if idle.Devices["h100"] != 1 || idle.Partitioned["h100"] != 1 {
		t.Fatalf("an idle MIG H100 counts %d free H100s (%d partitioned); want the one GPU", idle.Devices["h100"], idle.Partitioned["h100"])
	}
	busy, err := (&Runner{Client: fake.NewClientset(devices, counters, claim)}).inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if busy.Devices["h100"] != 0 || busy.Partitioned["h100"] != 0 {
		t.Errorf("with %s taken, the inventory counts %d free H100 devices (%d partitioned); want 0: the GPU's counters are spent", full, busy.Devices["h100"], busy.Partitioned["h100"])
	}
}

// Requirements per node and per domain: a claim's devices are on one
// node, so 3 free H100s spread over nodes of 2 do not meet a need of 3 on
// one node; a gang that must fill a domain needs exactly the domains it
// was written for.
func TestRequirementsPerNodeAndDomain(t *testing.T) {
	inv := Inventory{Devices: map[string]int{"h100": 4},
		FreeOnNode:   map[string]map[string]int{"h100": {"a": 2, "b": 2}},
		NodeLabelsOf: map[string]map[string]string{"a": {"domain": "d1"}, "b": {"domain": "d2"}}}
	three := Requirements{Nodes: []NodeRequirement{{Tier: "h100", Devices: 3}}}
	if err := inv.meets(three); !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "1 nodes with 3 free h100 GPUs each, as a claim's devices are on one node (it has 0: a 2, b 2)") {
		t.Errorf("3 H100s on one node, 2 + 2 free: %v; want unmet, counting per node", err)
	}
	if err := inv.meets(Requirements{Nodes: []NodeRequirement{{Tier: "h100", Devices: 2, Count: 2}}}); err != nil {
		t.Errorf("two nodes of 2 free H100s: %v", err)
	}
	domains := Requirements{Domains: &DomainRequirement{Label: "domain", Tier: "h100", Count: 2, Devices: 2}}
	if err := inv.meets(domains); err != nil {
		t.Errorf("two domains of 2: %v", err)
	}
	inv.FreeOnNode["h100"]["c"] = 2
	inv.NodeLabelsOf["c"] = map[string]string{"domain": "d2"}
	if err := inv.meets(domains); !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "(it has d1 2, d2 4)") {
		t.Errorf("a domain of 4 where the gang needs exactly 2: %v; want unmet, counting per domain", err)
	}
}

// slicesOf publishes a node's fake GPUs and NICs as the drivers do.
func slicesOf(t *testing.T, node, gpuProfile string, gpus int, nicProfile string, nics int) []runtime.Object {
	t.Helper()
	ctx := context.Background()
	slice := func(driver string, devs []kit.Device) *resourceapi.ResourceSlice {
		sl := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-" + driver}, Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
		for _, d := range devs {
			sl.Spec.Devices = append(sl.Spec.Devices, d.API)
		}
		return sl
	}
	var out []runtime.Object
	if gpus > 0 {
		p, err := fakegpu.LookupProfile(gpuProfile)
		if err != nil {
			t.Fatal(err)
		}
		devs, err := (&fakegpu.Inventory{Node: node, Profile: p, Count: gpus}).Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, slice(gpu.DriverName, devs))
	}
	if nics > 0 {
		p, err := fakenic.LookupProfile(nicProfile)
		if err != nil {
			t.Fatal(err)
		}
		devs, err := (&fakenic.Inventory{Node: node, Profile: p, Count: nics}).Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, slice(fakenic.DriverName, devs))
	}
	return out
}

// nicClasses are the NIC driver's DeviceClasses.
func nicClasses() []runtime.Object {
	var out []runtime.Object
	for _, c := range fakenic.DeviceClasses() {
		out = append(out, &c)
	}
	return out
}

// Pairs across two drivers are counted per node and per value, from
// what is free: gpu-nic-pair's and derived-alignment's counts follow the
// cluster's shape instead of gpu-nic.yaml's.
func TestInventoryCountsPairsAcrossDrivers(t *testing.T) {
	ctx := context.Background()
	pcie := &Pairs{Tier: "l4", Attribute: "resource.kubernetes.io/pcieRoot", Class: fakenic.ClassRDMA}
	numa := &Pairs{Tier: "h100", Attribute: "gpu.dralab.dev/numa", Class: fakenic.ClassRDMA, ClassAttribute: "resource.kubernetes.io/numaNode", Except: []string{"0"}}
	numa0 := &DeviceNodes{Class: fakenic.ClassRDMA, Attribute: "resource.kubernetes.io/numaNode", Value: "0"}

	// Four L4s, two under each of two roots, and two NICs under the first
	// root; eight H100s and eight NICs, four of each per NUMA node; two
	// NICs without RDMA, not of the class the pairs ask for.
	objs := slices.Concat(nicClasses(), slicesOf(t, "l4-nic", "l4-24gb", 4, "cx6dx-100g", 2), slicesOf(t, "h100-a", "h100-80gb", 8, "cx7-400g", 8), slicesOf(t, "cpu-nic", "", 0, "x710-10g", 2))
	inv, err := (&Runner{Client: fake.NewClientset(objs...)}).inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.PairsOf(pcie); got != 2 {
		t.Errorf("L4-NIC pairs under one root = %d, want 2 (two L4s and two NICs under the first root, none under the second)", got)
	}
	if got := inv.PairsOf(numa); got != 4 {
		t.Errorf("H100-NIC pairs on a NUMA node other than 0 = %d, want 4", got)
	}
	if got := inv.NodesOf(numa0); got != 2 {
		t.Errorf("nodes with a free NUMA-0 RDMA NIC = %d, want 2 (the X710s have no RDMA)", got)
	}
	req := Requirements{Pairs: []PairRequirement{{Pairs: *pcie, Spare: true}, {Pairs: *numa, Spare: true}}}
	if err := inv.meets(req); err != nil {
		t.Errorf("meets = %v, want met", err)
	}

	// A claim holds the first NIC: one pair is left under the first root.
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "held", Namespace: "other"},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "nic", Driver: fakenic.DriverName, Pool: "l4-nic", Device: "nic-0"}}}}}}
	inv, err = (&Runner{Client: fake.NewClientset(append(objs, claim)...)}).inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := inv.PairsOf(pcie); got != 1 {
		t.Errorf("with a NIC held, L4-NIC pairs = %d, want 1", got)
	}

	// Two L4s and two NICs under one root: pairs, but no spare L4 for the
	// pod that is to wait for its constraint.
	inv, err = (&Runner{Client: fake.NewClientset(slices.Concat(nicClasses(), slicesOf(t, "l4-nic", "l4-24gb", 2, "cx6dx-100g", 2))...)}).inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = inv.meets(Requirements{Pairs: []PairRequirement{{Pairs: *pcie, Spare: true}}})
	if !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "more free l4 GPUs than the 2 that have a free rdma.nic.dralab.dev device agreeing on resource.kubernetes.io/pcieRoot beside them (it has 2)") {
		t.Errorf("meets = %v, want unmet for want of a spare L4", err)
	}
	// NICs without RDMA only: no pair.
	inv, err = (&Runner{Client: fake.NewClientset(slices.Concat(nicClasses(), slicesOf(t, "l4-nic", "l4-24gb", 2, "x710-10g", 2))...)}).inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = inv.meets(Requirements{Pairs: []PairRequirement{{Pairs: *pcie}}})
	if !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "a free l4 GPU and a free rdma.nic.dralab.dev device agreeing on resource.kubernetes.io/pcieRoot on one node") {
		t.Errorf("meets = %v, want unmet for want of a pair", err)
	}
}

// A scenario that takes a node's every H100 (admin-access's All claim) is
// unmet while an H100 is tainted: the device taint manager would evict its
// pod, and the expectation would find no pod.
func TestUntaintedTiersAreRequired(t *testing.T) {
	req := Requirements{UntaintedTiers: []string{"h100"}}
	inv := Inventory{Tainted: map[string]int{"h100": 1}}
	if err := inv.meets(req); !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "no tainted h100 GPU (it has 1") {
		t.Errorf("meets = %v, want unmet for a tainted H100", err)
	}
	inv.Tainted["h100"] = 0
	if err := inv.meets(req); err != nil {
		t.Errorf("no H100 tainted: %v", err)
	}
}

// A node's taint, as kubectl writes it, meets nodeTaints; another taint,
// or one of another value, does not.
func TestNodeTaintsAreRequired(t *testing.T) {
	req := Requirements{NodeTaints: []string{"nvidia.com/gpu=present:NoSchedule"}}
	inv := Inventory{NodeTaints: map[string]bool{"nvidia.com/gpu=absent:NoSchedule": true, "dedicated:NoExecute": true}}
	if err := inv.meets(req); !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "a node tainted nvidia.com/gpu=present:NoSchedule") {
		t.Errorf("meets = %v, want unmet naming the taint", err)
	}
	inv.NodeTaints[taintString(v1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: v1.TaintEffectNoSchedule})] = true
	if err := inv.meets(req); err != nil {
		t.Errorf("a node tainted so: %v", err)
	}
}

// An unmet scenario names the example lab it is written for, and how to
// bring that lab up.
func TestUnmetNamesTheScenariosLab(t *testing.T) {
	s, err := Parse("scenario.yaml", []byte(`apiVersion: scenarios.dralab.dev/v1alpha1
kind: Scenario
name: needs-h100s
title: t
summary: s
lab: frontier
requires: {tiers: [h100]}
steps: [{name: a, apply: [pod.yaml]}]
`), []string{"pod.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&Runner{Client: fake.NewClientset()}).Run(context.Background(), s)
	if !errors.Is(err, ErrUnmet) || !strings.Contains(err.Error(), "it is written for lab/examples/frontier.yaml (DRALAB_CONFIG=lab/examples/frontier.yaml go run mage.go lab:up)") {
		t.Errorf("Run on a cluster without GPUs = %v, want unmet naming lab/examples/frontier.yaml", err)
	}
}
