package devices

import (
	"context"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

const driver = "gpu.example.com"

// gpuSlice is node's pool at generation gen: a whole GPU and two halves,
// which share the GPU's 8 memory slices (the whole takes 8, a half 4).
func gpuSlice(node string, gen int64) resourceapi.ResourceSlice {
	consumes := func(n int64) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: *resource.NewQuantity(n, resource.DecimalSI)}}}}
	}
	return resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + string(rune('a'+gen))},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node),
			Pool:           resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1},
			SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: *resource.NewQuantity(8, resource.DecimalSI)}}}},
			Devices: []resourceapi.Device{
				{Name: "gpu-0", ConsumesCounters: consumes(8)},
				{Name: "gpu-0-half-0", ConsumesCounters: consumes(4)},
				{Name: "gpu-0-half-1", ConsumesCounters: consumes(4)},
				{Name: "nic-0"},
			},
		},
	}
}

func claim(name string, admin bool, devs ...Key) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	alloc := &resourceapi.AllocationResult{}
	for _, d := range devs {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: d.Driver, Pool: d.Pool, Device: d.Device, AdminAccess: ptr.To(admin)})
	}
	c.Status.Allocation = alloc
	return c
}

func names(devs []Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Pool+"/"+d.Name)
	}
	return out
}

func TestCurrentIsTheNewestGeneration(t *testing.T) {
	other := gpuSlice("n2", 1)
	other.Spec.Driver = "other.example.com"
	s := &State{Slices: []resourceapi.ResourceSlice{gpuSlice("n1", 1), gpuSlice("n1", 2), gpuSlice("n2", 1), other}}
	if got := s.Current(driver, "n1"); len(got) != 1 || got[0].Spec.Pool.Generation != 2 {
		t.Errorf("Current(n1) = %d slices (generation %d); want the one of generation 2", len(got), got[0].Spec.Pool.Generation)
	}
	if got := s.Published(driver, ""); len(got) != 8 || got[0].Node != "n1" || got[4].Node != "n2" {
		t.Errorf("Published(any node) = %v; want n1's and n2's 4 devices each, newest generation only", names(got))
	}
	if got := s.Published("other.example.com", ""); len(got) != 4 || got[0].Driver != "other.example.com" {
		t.Errorf("Published(other driver) = %v; want its 4 devices", names(got))
	}
}

func TestFreeDevices(t *testing.T) {
	half := Key{driver, "n1", "gpu-0-half-0"}
	s := &State{
		Slices: []resourceapi.ResourceSlice{gpuSlice("n1", 1)},
		Claims: []resourceapi.ResourceClaim{
			claim("half", false, half),
			// Admin access holds no device.
			claim("admin", true, Key{driver, "n1", "nic-0"}),
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending"}},
		},
	}
	if held := s.Held(); len(held) != 1 || held[half] != "ns/half" {
		t.Errorf("Held = %v; want only %s, by ns/half", held, half)
	}
	left := s.CountersLeft()
	if q := left[SetKey{driver, "n1", "gpu-0"}]["memory"]; q.Value() != 4 {
		t.Errorf("CountersLeft gpu-0/memory = %s; want 4 of 8 after a half", q.String())
	}
	// The whole GPU is held by no claim, but the half taken leaves its
	// counters too little.
	if got, want := names(s.Free(driver, "n1")), []string{"n1/gpu-0-half-1", "n1/nic-0"}; !slices.Equal(got, want) {
		t.Errorf("Free = %v; want %v", got, want)
	}
	// Nothing allocated: all four free, each on its own, but only the
	// whole GPU and the NIC (first fit) together.
	s.Claims = nil
	free := s.Free(driver, "")
	if len(free) != 4 {
		t.Errorf("Free with no claim = %v; want all 4", names(free))
	}
	if got, want := names(s.Together(free, 3)), []string{"n1/gpu-0", "n1/nic-0"}; !slices.Equal(got, want) {
		t.Errorf("Together(3) = %v; want %v: the halves share the whole GPU's counters", got, want)
	}
	if got := s.Together(free, 1); len(got) != 1 || got[0].Name != "gpu-0" {
		t.Errorf("Together(1) = %v; want the first", names(got))
	}
}

func TestRead(t *testing.T) {
	sl := gpuSlice("n1", 1)
	c := claim("half", false, Key{driver, "n1", "gpu-0-half-0"})
	client := fake.NewClientset(&sl, &c)
	s, err := Read(context.Background(), client, driver)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(s.Free(driver, "n1")), []string{"n1/gpu-0-half-1", "n1/nic-0"}; !slices.Equal(got, want) {
		t.Errorf("Free after Read = %v; want %v", got, want)
	}
}

// TestTaintedDevicesAreNotFree: a device's own NoSchedule taint and a
// DeviceTaintRule's NoExecute taint keep devices from a request that does
// not tolerate them, each taint matched by its own toleration; None
// effects and a rule without a selector keep nothing.
func TestTaintedDevicesAreNotFree(t *testing.T) {
	sl := gpuSlice("n1", 1)
	sl.Spec.Devices[3].Taints = []resourceapi.DeviceTaint{{Key: "example.com/broken", Value: "xid", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	sl.Spec.Devices[2].Taints = []resourceapi.DeviceTaint{{Key: "example.com/note", Effect: resourceapi.DeviceTaintEffectNone}}
	rule := func(name string, sel *resourceapi.DeviceTaintSelector, effect resourceapi.DeviceTaintEffect) resourceapi.DeviceTaintRule {
		return resourceapi.DeviceTaintRule{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourceapi.DeviceTaintRuleSpec{
			DeviceSelector: sel, Taint: resourceapi.DeviceTaint{Key: "example.com/" + name, Effect: effect}}}
	}
	half0 := &resourceapi.DeviceTaintSelector{Driver: ptr.To(driver), Pool: ptr.To("n1"), Device: ptr.To("gpu-0-half-0")}
	rules := []resourceapi.DeviceTaintRule{
		rule("drain", half0, resourceapi.DeviceTaintEffectNoExecute),
		rule("other-pool", &resourceapi.DeviceTaintSelector{Pool: ptr.To("n2")}, resourceapi.DeviceTaintEffectNoSchedule),
		rule("no-selector", nil, resourceapi.DeviceTaintEffectNoSchedule),
	}
	client := fake.NewClientset(&sl, &rules[0], &rules[1], &rules[2])
	s, err := Read(context.Background(), client, driver)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.TaintRules) != 3 {
		t.Fatalf("Read found %d DeviceTaintRules, want 3", len(s.TaintRules))
	}
	if got, want := names(s.Free(driver, "n1")), []string{"n1/gpu-0", "n1/gpu-0-half-1"}; !slices.Equal(got, want) {
		t.Errorf("Free = %v; want %v: nic-0 is tainted in its slice, gpu-0-half-0 by the rule drain", got, want)
	}
	tolerateBroken := []resourceapi.DeviceToleration{{Key: "example.com/broken", Operator: resourceapi.DeviceTolerationOpEqual, Value: "xid", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	if got, want := names(s.FreeFor(driver, "n1", tolerateBroken)), []string{"n1/gpu-0", "n1/gpu-0-half-1", "n1/nic-0"}; !slices.Equal(got, want) {
		t.Errorf("FreeFor(tolerating broken=xid) = %v; want %v", got, want)
	}
	// A toleration of another value or another effect tolerates nothing:
	// any toleration is not every toleration.
	for _, tol := range []resourceapi.DeviceToleration{
		{Key: "example.com/broken", Operator: resourceapi.DeviceTolerationOpEqual, Value: "ecc"},
		{Key: "example.com/broken", Operator: resourceapi.DeviceTolerationOpExists, Effect: resourceapi.DeviceTaintEffectNoExecute},
		{Key: "example.com/drain", Operator: resourceapi.DeviceTolerationOpExists},
	} {
		if got := names(s.FreeFor(driver, "n1", []resourceapi.DeviceToleration{tol})); slices.Contains(got, "n1/nic-0") {
			t.Errorf("FreeFor(%+v) = %v: holds nic-0, whose taint broken=xid:NoSchedule it does not tolerate", tol, got)
		}
	}
	everything := []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}}
	if got := s.FreeFor(driver, "n1", everything); len(got) != 4 {
		t.Errorf("FreeFor(tolerate all) = %v; want all 4", names(got))
	}
	var d Device
	for _, p := range s.Published(driver, "n1") {
		if p.Name == "gpu-0-half-0" {
			d = p
		}
	}
	if taints := s.Taints(d); len(taints) != 1 || taints[0].Key != "example.com/drain" {
		t.Errorf("Taints(gpu-0-half-0) = %v; want the rule drain's only (no-selector selects nothing, other-pool another pool)", taints)
	}
}

// sharedGPUSlice is node n1's pool of two GPUs, gpu-0 of 80Gi and gpu-1 of
// 160Gi, each published as one device that allows multiple allocations and
// consumes 80Gi of its GPU's counter set; gpu-1 is published besides as an
// exclusive half of 80Gi.
func sharedGPUSlice() resourceapi.ResourceSlice {
	gi := func(n int64) resourceapi.Counter {
		return resourceapi.Counter{Value: *resource.NewQuantity(n<<30, resource.BinarySI)}
	}
	set := func(name string, n int64) resourceapi.CounterSet {
		return resourceapi.CounterSet{Name: name, Counters: map[string]resourceapi.Counter{"memory": gi(n)}}
	}
	consumes := func(set string, n int64) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: set, Counters: map[string]resourceapi.Counter{"memory": gi(n)}}}
	}
	return resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "n1-shared"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To("n1"),
			Pool:           resourceapi.ResourcePool{Name: "n1", Generation: 1, ResourceSliceCount: 1},
			SharedCounters: []resourceapi.CounterSet{set("gpu-0", 80), set("gpu-1", 160)},
			Devices: []resourceapi.Device{
				{Name: "gpu-0-shared", AllowMultipleAllocations: ptr.To(true), ConsumesCounters: consumes("gpu-0", 80)},
				{Name: "gpu-0-small", ConsumesCounters: consumes("gpu-0", 10)},
				{Name: "gpu-1-shared", AllowMultipleAllocations: ptr.To(true), ConsumesCounters: consumes("gpu-1", 80)},
				{Name: "gpu-1-half", ConsumesCounters: consumes("gpu-1", 80)},
			},
		},
	}
}

// shares are claims each holding one share (its own shareID) of every
// device named.
func shares(claim string, devs ...string) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: claim}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devs {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, resourceapi.DeviceRequestAllocationResult{
			Request: "r", Driver: driver, Pool: "n1", Device: d, ShareID: ptr.To(types.UID(claim + "-" + d))})
	}
	return c
}

// TestSharedDeviceConsumesCountersOnce: a device that allows multiple
// allocations, shared by two claims (two results, distinct shareIDs),
// consumes its counters once, as in Kubernetes' allocator: gpu-0's 80Gi
// are used up, not overcommitted by 80Gi, and gpu-1's 160Gi keep 80Gi for
// its exclusive half.
func TestSharedDeviceConsumesCountersOnce(t *testing.T) {
	s := &State{
		Slices: []resourceapi.ResourceSlice{sharedGPUSlice()},
		Claims: []resourceapi.ResourceClaim{shares("a", "gpu-0-shared", "gpu-1-shared"), shares("b", "gpu-0-shared", "gpu-1-shared")},
	}
	left := s.CountersLeft()
	for set, want := range map[string]string{"gpu-0": "0", "gpu-1": "80Gi"} {
		if q := left[SetKey{driver, "n1", set}]["memory"]; q.Cmp(resource.MustParse(want)) != 0 {
			t.Errorf("CountersLeft %s/memory = %s; want %s: two shares of one device consume its 80Gi once", set, q.String(), want)
		}
	}
	// The shared devices are held; gpu-0-small finds no memory left on
	// gpu-0, gpu-1-half finds its 80Gi on gpu-1.
	if got, want := names(s.Free(driver, "n1")), []string{"n1/gpu-1-half"}; !slices.Equal(got, want) {
		t.Errorf("Free = %v; want %v", got, want)
	}
	everything := []resourceapi.DeviceToleration{{Operator: resourceapi.DeviceTolerationOpExists}}
	if got, want := names(s.FreeFor(driver, "n1", everything)), []string{"n1/gpu-1-half"}; !slices.Equal(got, want) {
		t.Errorf("FreeFor(tolerate all) = %v; want %v", got, want)
	}
	if got, want := names(s.Together(s.Free(driver, "n1"), 2)), []string{"n1/gpu-1-half"}; !slices.Equal(got, want) {
		t.Errorf("Together(2) = %v; want %v", got, want)
	}
	// A device a claim holds in two results is one device too.
	s.Claims = []resourceapi.ResourceClaim{shares("twice", "gpu-1-shared", "gpu-1-shared")}
	if q := s.CountersLeft()[SetKey{driver, "n1", "gpu-1"}]["memory"]; q.Cmp(resource.MustParse("80Gi")) != 0 {
		t.Errorf("CountersLeft gpu-1/memory = %s with one claim sharing gpu-1-shared twice; want 80Gi", q.String())
	}
}

// A node's devices are every device it reaches: its own slice's, a rack's
// by the slice's node selector, everyone's by allNodes, and per device by
// each device's own selection; without the nodes read, a node has only
// the devices published for its name.
func TestReachedDevices(t *testing.T) {
	rack := func(r string) *v1.NodeSelector {
		return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: "rack", Operator: v1.NodeSelectorOpIn, Values: []string{r}}}}}}
	}
	node := func(name, r string) v1.Node {
		return v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"rack": r}}}
	}
	dev := func(name string) resourceapi.Device { return resourceapi.Device{Name: name} }
	pool := func(name string) resourceapi.ResourcePool {
		return resourceapi.ResourcePool{Name: name, Generation: 1, ResourceSliceCount: 1}
	}
	split := []resourceapi.Device{dev("split-0"), dev("split-1"), dev("split-2")}
	split[0].NodeSelector, split[1].NodeName, split[2].AllNodes = rack("b"), ptr.To("a1"), ptr.To(true)
	st := &State{Slices: []resourceapi.ResourceSlice{
		{Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: pool("a1"), NodeName: ptr.To("a1"), Devices: []resourceapi.Device{dev("local")}}},
		{Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: pool("rack-a"), NodeSelector: rack("a"), Devices: []resourceapi.Device{dev("rack-a")}}},
		{Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: pool("shared"), AllNodes: ptr.To(true), Devices: []resourceapi.Device{dev("shared")}}},
		{Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: pool("split"), PerDeviceNodeSelection: ptr.To(true), Devices: split}},
	}}
	names := func(ds []Device) []string {
		var out []string
		for _, d := range ds {
			out = append(out, d.Name)
		}
		return out
	}
	if got := names(st.Published(driver, "a1")); !slices.Equal(got, []string{"local", "split-1"}) {
		t.Errorf("a1's devices without the nodes read: %v, want [local split-1]", got)
	}
	client := fake.NewClientset(ptr.To(node("a1", "a")), ptr.To(node("b1", "b")))
	if err := st.ReadNodes(context.Background(), client); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[string][]string{
		"a1": {"local", "rack-a", "shared", "split-1", "split-2"},
		"b1": {"shared", "split-0", "split-2"},
		"c1": nil, // no such node: only slices of its name, none
	} {
		if got := names(st.Published(driver, n)); !slices.Equal(got, want) {
			t.Errorf("%s's devices: %v, want %v", n, got, want)
		}
	}
	if got := st.Reached(&st.Slices[1], nil); !slices.Equal(got, []string{"a1"}) {
		t.Errorf("rack a's slice reaches %v, want [a1]", got)
	}
	if got := st.Reached(&st.Slices[3], &st.Slices[3].Spec.Devices[0]); !slices.Equal(got, []string{"b1"}) {
		t.Errorf("split-0 reaches %v, want [b1]", got)
	}
	if got := len(st.Current(driver, "b1")); got != 2 {
		t.Errorf("b1's current slices: %d, want 2 (shared, split)", got)
	}
}
