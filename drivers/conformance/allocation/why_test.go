package allocation

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// withTier gives a device a tier attribute.
func withTier(d resourceapi.Device, tier string) resourceapi.Device {
	d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"tier": {StringValue: ptr.To(tier)}}
	return d
}

func tier(name string, tolerations ...resourceapi.DeviceToleration) alternative {
	return alternative{name: "gpu", class: "any", count: 1, tolerations: tolerations,
		selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["` + drv + `"].tier == "` + name + `"`}}}}
}

// A selector that fails on a device stops the allocator on that claim: the
// explanation says so, naming selector and device, rather than "no match".
func TestWhySelectorError(t *testing.T) {
	s := snapshot([]resourceapi.Device{{Name: "plain"}, withTier(resourceapi.Device{Name: "gpu-0"}, "h100")})
	code, msg, err := s.whyAlternatives(context.Background(), "ns", "request gpu", []alternative{tier("h100")}, s.AllocatedDevices())
	if err != nil || code != SelectorError || !strings.Contains(msg, `fails on device n/plain`) || !strings.Contains(msg, "has()") {
		t.Fatalf("got %q %q %v; want SelectorError naming n/plain and how to guard", code, msg, err)
	}
}

// A toleration tolerates the taints it matches, each on its own: one for
// another key leaves the device tainted; one for the key makes it free. A
// DeviceTaintRule's taint counts as the slice's own does.
func TestWhyTaintsPerToleration(t *testing.T) {
	h100 := withTier(resourceapi.Device{Name: "gpu-0", Taints: []resourceapi.DeviceTaint{{Key: "dralab.dev/unhealthy", Value: "xid-79", Effect: resourceapi.DeviceTaintEffectNoSchedule}}}, "h100")
	s := snapshot([]resourceapi.Device{h100, withTier(resourceapi.Device{Name: "gpu-1"}, "a100")})
	ctx := context.Background()
	other := resourceapi.DeviceToleration{Key: "example.com/maintenance", Operator: resourceapi.DeviceTolerationOpExists}
	code, msg, err := s.whyAlternatives(ctx, "ns", "request gpu", []alternative{tier("h100", other)}, s.AllocatedDevices())
	if err != nil || code != Tainted || !strings.Contains(msg, "n/gpu-0 (dralab.dev/unhealthy=xid-79:NoSchedule)") {
		t.Errorf("a toleration of another key: %q %q %v; want Tainted naming the device and its taint", code, msg, err)
	}
	tolerates := resourceapi.DeviceToleration{Key: "dralab.dev/unhealthy", Operator: resourceapi.DeviceTolerationOpExists}
	if code, msg, _ := s.whyAlternatives(ctx, "ns", "request gpu", []alternative{tier("h100", tolerates)}, s.AllocatedDevices()); code != "" {
		t.Errorf("a toleration of the taint: %q %q; want no reason, the device is free to it", code, msg)
	}

	// The A100 tainted by a rule, the H100 held: both block, and both are
	// named.
	s = snapshot([]resourceapi.Device{withTier(resourceapi.Device{Name: "gpu-0"}, "h100"), withTier(resourceapi.Device{Name: "gpu-1"}, "a100")}, claimOn("trainer", "gpu-0", nil))
	s.TaintRules = []resourceapi.DeviceTaintRule{{ObjectMeta: metav1.ObjectMeta{Name: "drain"}, Spec: resourceapi.DeviceTaintRuleSpec{
		DeviceSelector: &resourceapi.DeviceTaintSelector{Device: ptr.To("gpu-1")},
		Taint:          resourceapi.DeviceTaint{Key: "example.com/drain", Effect: resourceapi.DeviceTaintEffectNoExecute}}}}
	code, msg, err = s.whyAlternatives(ctx, "ns", "request gpu", []alternative{tier("h100"), tier("a100")}, s.AllocatedDevices())
	if err != nil || code != AllAllocated || !strings.Contains(msg, "allocated: n/gpu-0 to trainer") || !strings.Contains(msg, "n/gpu-1 (example.com/drain:NoExecute)") {
		t.Errorf("one held, one tainted by a rule: %q %q %v; want both named", code, msg, err)
	}
	if got := s.DeviceTaints(drv, "n", "gpu-1"); len(got) != 1 || got[0] != "example.com/drain:NoExecute" {
		t.Errorf("DeviceTaints(gpu-1) = %v; want the rule's", got)
	}
}

// withRoot gives a device a tier and a PCIe root.
func withRoot(name, root string) resourceapi.Device {
	d := withTier(resourceapi.Device{Name: name}, "l4")
	d.Attributes["resource.kubernetes.io/pcieRoot"] = resourceapi.DeviceAttribute{StringValue: ptr.To(root)}
	return d
}

// A pair that must share a PCIe root: with two free L4s under different
// roots the explanation names the constraint and the groups, not "all
// allocated"; with one free L4 beside two allocated it says how many are
// free and how many the request needs.
func TestWhyConstraint(t *testing.T) {
	ctx := context.Background()
	pair := tier("l4")
	pair.count, pair.match = 2, "resource.kubernetes.io/pcieRoot"
	devs := []resourceapi.Device{withRoot("gpu-0", "pci0000:15"), withRoot("gpu-1", "pci0000:15"), withRoot("gpu-2", "pci0000:37")}

	s := snapshot(devs, claimOn("pair-0", "gpu-0", nil))
	code, msg, err := s.whyAlternatives(ctx, "ns", "request gpus", []alternative{pair}, s.AllocatedDevices())
	if err != nil || code != ConstraintUnmet || !strings.Contains(msg, "of the 2 free matching devices, at most 1 do") ||
		!strings.Contains(msg, "n: gpu-1 on pci0000:15; n: gpu-2 on pci0000:37") {
		t.Errorf("two free under two roots: %q %q %v; want ConstraintUnmet naming the groups", code, msg, err)
	}

	s = snapshot(devs, claimOn("pair-0", "gpu-0", nil), claimOn("pair-0b", "gpu-1", nil))
	code, msg, err = s.whyAlternatives(ctx, "ns", "request gpus", []alternative{pair}, s.AllocatedDevices())
	if err != nil || code != AllAllocated || !strings.Contains(msg, "needs 2, and 1 matching devices are free (n/gpu-2)") || !strings.Contains(msg, "allocated: n/gpu-0 to pair-0, n/gpu-1 to pair-0b") {
		t.Errorf("one free of three: %q %q %v; want the free one and the allocated ones named", code, msg, err)
	}

	s = snapshot(append(devs, withRoot("gpu-3", "pci0000:37")), claimOn("pair-0", "gpu-0", nil))
	if code, msg, _ := s.whyAlternatives(ctx, "ns", "request gpus", []alternative{pair}, s.AllocatedDevices()); code != "" {
		t.Errorf("gpu-2 and gpu-3 share a root: %q %q, want no reason", code, msg)
	}
}

// Admin access takes no device from anyone, but the allocator still checks
// a partitioned device's counters: an admin claim for a whole GPU whose
// counters a workload holds waits, and the explanation names the counter.
func TestWhyAdminAccessNeedsCounters(t *testing.T) {
	whole := resourceapi.Device{Name: "gpu-0", ConsumesCounters: consumes("gpu-0-counters", map[string]string{"slice-0": "1", "slice-1": "1"})}
	s := snapshot([]resourceapi.Device{withName(whole)}, claimOn("trainer", "gpu-0", nil))
	admin := named("gpu-0")
	admin.adminAccess = true
	code, msg, err := s.whyAlternatives(context.Background(), "ns", "monitor", []alternative{admin}, s.AllocatedDevices())
	if err != nil || code != CounterExhausted || !strings.Contains(msg, "trainer") {
		t.Errorf("got %q %q %v; want CounterExhausted naming the trainer's hold", code, msg, err)
	}
}

// A GPU and a NIC of two drivers that must share a PCIe root: each request
// fits on its own, but no root has both free. The explanation names, per
// node and root, what each request has free there and who holds the rest;
// with a free NIC beside a free GPU there is nothing to explain.
func TestWhyTogether(t *testing.T) {
	const nicDriver = "nic.dralab.dev"
	root := func(d resourceapi.Device, r string) resourceapi.Device {
		d.Attributes = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(r)}}
		return d
	}
	link := resource.MustParse("400G")
	nic := func(name, r string) resourceapi.Device {
		d := root(resourceapi.Device{Name: name, AllowMultipleAllocations: ptr.To(true)}, r)
		d.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"bandwidth": {Value: link, RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: &link}}}
		return d
	}
	pairOn := func(name, gpu, nicDev string) resourceapi.ResourceClaim {
		c := claimOn(name, gpu, nil)
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "nic", Driver: nicDriver, Pool: "n", Device: nicDev, ShareID: ptr.To[types.UID]("s-" + types.UID(name)),
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"bandwidth": link}})
		return c
	}
	build := func(nics []resourceapi.Device, claims ...resourceapi.ResourceClaim) *Snapshot {
		s := snapshot([]resourceapi.Device{root(resourceapi.Device{Name: "gpu-0"}, "pci0000:15"), root(resourceapi.Device{Name: "gpu-1"}, "pci0000:15"), root(resourceapi.Device{Name: "gpu-2"}, "pci0000:37")}, claims...)
		s.Slices = append(s.Slices, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: nicDriver, Pool: resourceapi.ResourcePool{Name: "n", ResourceSliceCount: 1}, Devices: nics}})
		s.Classes["gpu"] = &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "gpu"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + drv + `"`}}}}}
		s.Classes["nic"] = &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "nic"}, Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + nicDriver + `"`}}}}}
		return s
	}
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pair-2"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
		Requests: []resourceapi.DeviceRequest{
			{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}},
			{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nic", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}},
		},
		Constraints: []resourceapi.DeviceConstraint{{Requests: []string{"gpu", "nic"}, MatchAttribute: ptr.To[resourceapi.FullyQualifiedName]("resource.kubernetes.io/pcieRoot")}},
	}}}
	ctx := context.Background()

	// gpu-1 free under pci0000:15, whose NICs pair-0 and pair-1 hold;
	// gpu-2 free under pci0000:37, which has no NIC; a free NIC on node
	// m, which has no GPU: named once, not root by root.
	s := build([]resourceapi.Device{nic("nic-0", "pci0000:15"), nic("nic-1", "pci0000:15")}, pairOn("pair-0", "gpu-0", "nic-0"), pairOn("pair-1", "gpu-9", "nic-1"))
	s.Slices = append(s.Slices, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: nicDriver, Pool: resourceapi.ResourcePool{Name: "m", ResourceSliceCount: 1}, Devices: []resourceapi.Device{nic("nic-0", "pci0000:15")}}})
	code, msg, err := s.whyTogether(ctx, claim, s.AllocatedDevices())
	for _, want := range []string{
		"requests gpu and nic must share resource.kubernetes.io/pcieRoot on one node",
		"n pci0000:15: gpu: gpu-1 free; nic: 0 free of 1 needed (nic-0 has 400G of bandwidth, 400G consumed by pair-0",
		"nic-1 has 400G of bandwidth, 400G consumed by pair-1",
		"n pci0000:37: gpu: gpu-2 free; nic: none under pci0000:37",
		"no device for request gpu on m",
	} {
		if err != nil || code != ConstraintUnmet || !strings.Contains(msg, want) {
			t.Errorf("no free NIC beside a free GPU: %q %q %v; want ConstraintUnmet with %q", code, msg, err, want)
		}
	}
	if strings.Contains(msg, "m pci0000:15") {
		t.Errorf("node m has no GPU, but its roots are listed: %s", msg)
	}
	// Each request fits on its own: whyRequest finds nothing to say.
	for _, req := range claim.Spec.Devices.Requests {
		if code, msg, _ := s.whyRequest(ctx, claim, req, s.AllocatedDevices()); code != "" {
			t.Errorf("request %s alone: %q %q, want no reason", req.Name, code, msg)
		}
	}

	s = build([]resourceapi.Device{nic("nic-0", "pci0000:15"), nic("nic-1", "pci0000:15"), nic("nic-2", "pci0000:37")}, pairOn("pair-0", "gpu-0", "nic-0"), pairOn("pair-1", "gpu-9", "nic-1"))
	if code, msg, err := s.whyTogether(ctx, claim, s.AllocatedDevices()); err != nil || code != "" {
		t.Errorf("gpu-2 and nic-2 free under one root: %q %q %v, want no reason", code, msg, err)
	}
}

// A claim's devices are on one node: eight free GPUs, four on each of two
// nodes, do not hold a claim for eight. The explanation says so, counting
// per node, rather than giving no reason.
func TestWhyNotOnOneNode(t *testing.T) {
	var slices []resourceapi.ResourceSlice
	for _, node := range []string{"n1", "n2"} {
		sl := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: drv, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}}}
		for _, d := range []string{"gpu-0", "gpu-1", "gpu-2", "gpu-3"} {
			sl.Spec.Devices = append(sl.Spec.Devices, withTier(resourceapi.Device{Name: d}, "h100"))
		}
		slices = append(slices, sl)
	}
	s := &Snapshot{Classes: map[string]*resourceapi.DeviceClass{"any": {ObjectMeta: metav1.ObjectMeta{Name: "any"}}}, Slices: slices}
	eight := tier("h100")
	eight.count = 8
	code, msg, err := s.whyAlternatives(context.Background(), "ns", "request gpu", []alternative{eight}, s.AllocatedDevices())
	if err != nil || code != NotOnOneNode || !strings.Contains(msg, "needs 8 devices on one node, and 8 matching devices are free, but at most 4 on any node (n1 4, n2 4)") {
		t.Fatalf("eight H100s asked, four free on each of two nodes: %q %q %v; want NotOnOneNode counting per node", code, msg, err)
	}
	four := tier("h100")
	four.count = 4
	if code, msg, _ := s.whyAlternatives(context.Background(), "ns", "request gpu", []alternative{four}, s.AllocatedDevices()); code != "" {
		t.Errorf("four H100s asked, four free on a node: %q %q; want no reason", code, msg)
	}
}

// The report's CEL environment is the allocator's: a selector may read a
// device's allowMultipleAllocations and its list attributes, and one that
// does not compile is a SelectorError of the claim, not an error that stops
// the report.
func TestWhySelectorEnvironment(t *testing.T) {
	ctx := context.Background()
	shared := withTier(resourceapi.Device{Name: "gpu-0", AllowMultipleAllocations: ptr.To(true)}, "l4")
	shared.Attributes["numaNodes"] = resourceapi.DeviceAttribute{IntValues: []int64{0, 1}}
	s := snapshot([]resourceapi.Device{shared})
	sel := func(expr string) alternative {
		return alternative{name: "gpu", class: "any", count: 1, selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}
	}
	for _, expr := range []string{`device.allowMultipleAllocations`, `1 in device.attributes["` + drv + `"].numaNodes`} {
		if code, msg, err := s.whyAlternatives(ctx, "ns", "request gpu", []alternative{sel(expr)}, s.AllocatedDevices()); err != nil || code != "" {
			t.Errorf("selector %s on a free shared GPU with numaNodes [0, 1]: %q %q %v; want it to match", expr, code, msg, err)
		}
	}
	code, msg, err := s.whyAlternatives(ctx, "ns", "request gpu", []alternative{sel(`device.attributes[`)}, s.AllocatedDevices())
	if err != nil || code != SelectorError || !strings.Contains(msg, "does not compile") {
		t.Errorf("a selector that does not compile: %q %q %v; want SelectorError saying so", code, msg, err)
	}
}

// A constraint on a derived attribute is evaluated as the allocator does:
// each request's expression over its device, a list in the place of each of
// its values. A GPU of NUMA node 0 pairs with a NIC whose numaNode list is
// [0, 1] (no reason); asked for its NUMA node plus two it pairs with none,
// and the explanation names the values each request has free.
func TestWhyTogetherDerived(t *testing.T) {
	const nicDriver = "nic.dralab.dev"
	gpu := resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"numa": {IntValue: ptr.To[int64](0)}}}
	nic := resourceapi.Device{Name: "nic-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"resource.kubernetes.io/numaNode": {IntValues: []int64{0, 1}}}}
	s := snapshot([]resourceapi.Device{gpu})
	s.Slices = append(s.Slices, resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: nicDriver, Pool: resourceapi.ResourcePool{Name: "n", ResourceSliceCount: 1}, Devices: []resourceapi.Device{nic}}})
	s.Classes["gpu"] = &resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + drv + `"`}}}}}
	s.Classes["nic"] = &resourceapi.DeviceClass{Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + nicDriver + `"`}}}}}
	claim := func(gpuExpr string) *resourceapi.ResourceClaim {
		derived := func(expr string) []resourceapi.DeviceDerivedAttribute {
			return []resourceapi.DeviceDerivedAttribute{{Name: "derived/numa", Expression: expr}}
		}
		return &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pair"}, Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{
				{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, DerivedAttributes: derived(gpuExpr)}},
				{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "nic", AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1, DerivedAttributes: derived(`device.attributes["resource.kubernetes.io"].numaNode`)}},
			},
			Constraints: []resourceapi.DeviceConstraint{{Requests: []string{"gpu", "nic"}, MatchAttribute: ptr.To[resourceapi.FullyQualifiedName]("derived/numa")}},
		}}}
	}
	ctx := context.Background()
	if code, msg, err := s.whyTogether(ctx, claim(`device.attributes["`+drv+`"].numa`), s.AllocatedDevices()); err != nil || code != "" {
		t.Errorf("a NUMA-0 GPU and a NIC of NUMA [0, 1]: %q %q %v; want no reason, they pair", code, msg, err)
	}
	code, msg, err := s.whyTogether(ctx, claim(`device.attributes["`+drv+`"].numa + 2`), s.AllocatedDevices())
	for _, want := range []string{"n 0: gpu: none under 0; nic: nic-0 free", "n 2: gpu: gpu-0 free; nic: none under 2"} {
		if err != nil || code != ConstraintUnmet || !strings.Contains(msg, want) {
			t.Errorf("the GPU's value 2 and the NIC's [0, 1]: %q %q %v; want ConstraintUnmet with %q", code, msg, err, want)
		}
	}
}

// A snapshot of NewSnapshot classifies an alternative's devices once
// against its own holders, and afresh against other holders or for other
// tolerations: the memo never answers for what it was not asked.
func TestClassifiedOnce(t *testing.T) {
	ctx := context.Background()
	taint := resourceapi.DeviceTaint{Key: "dralab.dev/unhealthy", Effect: resourceapi.DeviceTaintEffectNoSchedule}
	base := snapshot([]resourceapi.Device{withTier(resourceapi.Device{Name: "gpu-0"}, "h100"), withTier(resourceapi.Device{Name: "gpu-1", Taints: []resourceapi.DeviceTaint{taint}}, "h100")},
		claimOn("trainer", "gpu-0", nil))
	s := NewSnapshot(Vocabulary{}, "", nil, base.AllClaims, base.Slices, []resourceapi.DeviceClass{*base.Classes["any"]}, nil, nil)
	for range 2 {
		code, msg, err := s.whyAlternatives(ctx, "ns", "request gpu", []alternative{tier("h100")}, s.AllocatedDevices())
		if err != nil || code != AllAllocated || !strings.Contains(msg, "n/gpu-0 to trainer") || !strings.Contains(msg, "n/gpu-1 (dralab.dev/unhealthy:NoSchedule)") {
			t.Fatalf("got %q %q %v; want AllAllocated naming the holder of gpu-0 and the taint of gpu-1", code, msg, err)
		}
	}
	if n := len(s.matchCache.classified); n != 1 {
		t.Errorf("one alternative asked twice against the snapshot's holders: %d classifications kept, want 1", n)
	}
	if code, msg, _ := s.whyAlternatives(ctx, "ns", "request gpu", []alternative{tier("h100")}, map[string]string{}); code != "" {
		t.Errorf("against no holders: %q %q; want no reason, gpu-0 free", code, msg)
	}
	tolerates := resourceapi.DeviceToleration{Key: taint.Key, Operator: resourceapi.DeviceTolerationOpExists}
	if code, msg, _ := s.whyAlternatives(ctx, "ns", "request gpu", []alternative{tier("h100", tolerates)}, s.AllocatedDevices()); code != "" {
		t.Errorf("tolerating the taint: %q %q; want no reason, gpu-1 free to it", code, msg)
	}
	if n := len(s.matchCache.classified); n != 2 {
		t.Errorf("after a second alternative: %d classifications kept, want 2", n)
	}
}
