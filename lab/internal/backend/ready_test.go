package backend

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakecpu"
	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// A node whose pool is published in several slices is ready only once all
// of them are: an NVML node in MIG mode publishes its counter sets and
// MIG devices one slice at a time, and a test that lists the slices as
// soon as the lab is up must see them all.
func TestNodeWaitsForItsWholePool(t *testing.T) {
	cfg := &config.Config{Nodes: []config.Node{{Name: "dgx", GPUs: &config.GPUs{NVML: "mock:dgxa100-mig", Mode: config.GPUModeDRA}}}}
	node := v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "dgx"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	slice := func(gen int64, devices int) resourceapi.ResourceSlice {
		s := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: gpu.DriverName, NodeName: ptr.To("dgx"),
			Pool: resourceapi.ResourcePool{Name: "dgx", Generation: gen, ResourceSliceCount: 3},
		}}
		for range devices {
			s.Spec.Devices = append(s.Spec.Devices, resourceapi.Device{})
		}
		return s
	}
	for _, tc := range []struct {
		name   string
		slices []resourceapi.ResourceSlice
		ready  bool
	}{
		{"one of three", []resourceapi.ResourceSlice{slice(1, 0)}, false},
		{"two of three", []resourceapi.ResourceSlice{slice(1, 0), slice(1, 52)}, false},
		{"three of three", []resourceapi.ResourceSlice{slice(1, 0), slice(1, 52), slice(1, 52)}, true},
		{"an older generation does not count", []resourceapi.ResourceSlice{slice(1, 52), slice(1, 52), slice(2, 0)}, false},
	} {
		missing := nodesNotReady(cfg, []v1.Node{node}, tc.slices, time.Time{}, SameName)
		if ready := len(missing) == 0; ready != tc.ready {
			t.Errorf("%s: ready %v (%v), want %v", tc.name, ready, missing, tc.ready)
		}
		if why := missing["dgx"].why; !tc.ready && why != "" && !strings.Contains(why, "only some") && !strings.Contains(why, "no GPUs") {
			t.Errorf("%s: %q", tc.name, why)
		}
	}
}

// A resumed lab's nodes are Ready in etcd from before the lab was killed:
// a node counts only once its kubelet has reported since the lab started.
func TestNodeReportsSinceTheLabStarted(t *testing.T) {
	started := time.Date(2026, 12, 2, 12, 0, 5, 700_000_000, time.UTC)
	cfg := &config.Config{Nodes: []config.Node{{Name: "n1"}}}
	node := func(heartbeat time.Time) v1.Node {
		return v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{
			{Type: v1.NodeReady, Status: v1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(heartbeat)}}}}
	}
	for _, tc := range []struct {
		name      string
		heartbeat time.Time
		since     time.Time
		ready     bool
	}{
		{"a fresh lab", started.Add(-time.Hour), time.Time{}, true},
		{"reported before the lab started", started.Add(-10 * time.Second), started, false},
		{"reported in the second it started", started.Truncate(time.Second), started, true},
		{"reported after", started.Add(2 * time.Second), started, true},
	} {
		missing := nodesNotReady(cfg, []v1.Node{node(tc.heartbeat)}, nil, tc.since, SameName)
		if ready := len(missing) == 0; ready != tc.ready {
			t.Errorf("%s: ready %v (%v), want %v", tc.name, ready, missing, tc.ready)
		}
		if !tc.ready && !strings.Contains(missing["n1"].why, "has not reported its status since the lab started") {
			t.Errorf("%s: %q", tc.name, missing["n1"].why)
		}
	}
}

// A node is ready once its GPUs are published as its configuration
// promises, not only counted: a partitioned GPU consumes its counters
// beside MIG devices, a shared one allows several allocations, a
// fabric-attached one has binding conditions. A driver that stops
// publishing them fails lab:up instead of leaving scenarios unmet.
func TestNodeWaitsForWhatItsConfigurationPromises(t *testing.T) {
	node := v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	whole := func(edit func(*resourceapi.Device)) resourceapi.Device {
		d := resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{gpu.AttrType: {StringValue: ptr.To(gpu.TypeGPU)}}}
		if edit != nil {
			edit(&d)
		}
		return d
	}
	mig := resourceapi.Device{Name: "gpu-0-mig-1g10gb-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{gpu.AttrType: {StringValue: ptr.To(gpu.TypeMIG)}}}
	counters := func(d *resourceapi.Device) {
		d.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0-counters"}}
	}
	shared := func(d *resourceapi.Device) { d.AllowMultipleAllocations = ptr.To(true) }
	fabric := func(d *resourceapi.Device) { d.BindingConditions = []string{"dralab.dev/attached"} }
	for _, tc := range []struct {
		name    string
		gpus    config.GPUs
		devices []resourceapi.Device
		ready   bool
	}{
		{"whole GPUs", config.GPUs{}, []resourceapi.Device{whole(nil)}, true},
		{"MIG without counters", config.GPUs{Partitioning: config.PartitioningMIG}, []resourceapi.Device{whole(nil), mig}, false},
		{"MIG without MIG devices", config.GPUs{Partitioning: config.PartitioningMIG}, []resourceapi.Device{whole(counters)}, false},
		{"MIG", config.GPUs{Partitioning: config.PartitioningMIG}, []resourceapi.Device{whole(counters), mig}, true},
		{"shared, not shareable", config.GPUs{Sharing: config.SharingMemory}, []resourceapi.Device{whole(nil)}, false},
		{"shared", config.GPUs{Sharing: config.SharingMemory}, []resourceapi.Device{whole(shared)}, true},
		{"fabric without binding conditions", config.GPUs{Attach: config.AttachFabric}, []resourceapi.Device{whole(nil)}, false},
		{"fabric", config.GPUs{Attach: config.AttachFabric}, []resourceapi.Device{whole(fabric)}, true},
	} {
		g := tc.gpus
		g.Count, g.Mode = 1, config.GPUModeDRA
		cfg := &config.Config{Nodes: []config.Node{{Name: "n1", GPUs: &g}}}
		slice := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: gpu.DriverName, NodeName: ptr.To("n1"), Pool: resourceapi.ResourcePool{Name: "n1", Generation: 1, ResourceSliceCount: 1}, Devices: tc.devices}}
		missing := nodesNotReady(cfg, []v1.Node{node}, []resourceapi.ResourceSlice{slice}, time.Time{}, SameName)
		if ready := len(missing) == 0; ready != tc.ready {
			t.Errorf("%s: ready %v (%v), want %v", tc.name, ready, missing, tc.ready)
		}
		if !tc.ready && !strings.Contains(missing["n1"].why, "published as its configuration says") {
			t.Errorf("%s: %q does not say what the configuration promised", tc.name, missing["n1"].why)
		}
	}
}

// A node with NICs is ready once its NIC driver has published all of
// them too, beside its GPUs; until then the NIC driver's log is the one
// to read.
func TestNodeWaitsForItsNICs(t *testing.T) {
	cfg := &config.Config{Nodes: []config.Node{{Name: "n", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, Mode: config.GPUModeDRA}, NICs: &config.NICs{Profile: "cx7-400g", Count: 2}}}}
	node := v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	slice := func(driver string, devices ...resourceapi.Device) resourceapi.ResourceSlice {
		return resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To("n"), Pool: resourceapi.ResourcePool{Name: "n", Generation: 1, ResourceSliceCount: 1}, Devices: devices,
		}}
	}
	gpus := slice(gpu.DriverName, resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{gpu.AttrType: {StringValue: ptr.To(gpu.TypeGPU)}}})
	one := slice(fakenic.DriverName, resourceapi.Device{Name: "nic-0"})
	both := slice(fakenic.DriverName, resourceapi.Device{Name: "nic-0"}, resourceapi.Device{Name: "nic-1"})

	missing := nodesNotReady(cfg, []v1.Node{node}, []resourceapi.ResourceSlice{gpus}, time.Time{}, SameName)
	if w := missing["n"]; w.component != nodedrivers.RoleNICDriver || w.why != "has 0 of its 2 NICs in ResourceSlices" {
		t.Errorf("GPUs without NICs: %+v, want the NICs missing, the NIC driver's log named", w)
	}
	missing = nodesNotReady(cfg, []v1.Node{node}, []resourceapi.ResourceSlice{gpus, one}, time.Time{}, SameName)
	if w := missing["n"]; w.why != "has 1 of its 2 NICs in ResourceSlices" {
		t.Errorf("one NIC of two: %+v", w)
	}
	if missing = nodesNotReady(cfg, []v1.Node{node}, []resourceapi.ResourceSlice{gpus, both}, time.Time{}, SameName); len(missing) != 0 {
		t.Errorf("GPUs and NICs published: %v, want ready", missing)
	}
	if missing = nodesNotReady(cfg, []v1.Node{node}, []resourceapi.ResourceSlice{both}, time.Time{}, SameName); missing["n"].component != labstate.RoleDriver {
		t.Errorf("NICs without GPUs: %+v, want the GPU driver named", missing["n"])
	}
}

// A node with CPU complexes is ready once its CPU driver has published
// all of them, beside its GPUs; until then the CPU driver's log is the one
// to read. (lab:up said Ready before the CPU driver had published.)
func TestNodeWaitsForItsCPUComplexes(t *testing.T) {
	cfg := &config.Config{Nodes: []config.Node{{Name: "n", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, Mode: config.GPUModeDRA}, CPUs: &config.CPUs{Complexes: 2, CPUsPerComplex: 8}}}}
	node := v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}}}}
	slice := func(driver string, devices ...resourceapi.Device) resourceapi.ResourceSlice {
		return resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To("n"), Pool: resourceapi.ResourcePool{Name: "n", Generation: 1, ResourceSliceCount: 1}, Devices: devices,
		}}
	}
	gpus := slice(gpu.DriverName, resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{gpu.AttrType: {StringValue: ptr.To(gpu.TypeGPU)}}})
	one := slice(fakecpu.DriverName, resourceapi.Device{Name: "ccx-0"})
	both := slice(fakecpu.DriverName, resourceapi.Device{Name: "ccx-0"}, resourceapi.Device{Name: "ccx-1"})

	missing := nodesNotReady(cfg, []v1.Node{node}, []resourceapi.ResourceSlice{gpus}, time.Time{}, SameName)
	if w := missing["n"]; w.component != nodedrivers.RoleCPUDriver || w.why != "has 0 of its 2 CPU complexes in ResourceSlices" {
		t.Errorf("GPUs without CPU complexes: %+v, want the complexes missing, the CPU driver's log named", w)
	}
	missing = nodesNotReady(cfg, []v1.Node{node}, []resourceapi.ResourceSlice{gpus, one}, time.Time{}, SameName)
	if w := missing["n"]; w.why != "has 1 of its 2 CPU complexes in ResourceSlices" {
		t.Errorf("one complex of two: %+v", w)
	}
	if missing = nodesNotReady(cfg, []v1.Node{node}, []resourceapi.ResourceSlice{gpus, both}, time.Time{}, SameName); len(missing) != 0 {
		t.Errorf("GPUs and CPU complexes published: %v, want ready", missing)
	}
}
