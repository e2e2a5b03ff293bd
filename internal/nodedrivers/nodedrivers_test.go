package nodedrivers

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakecpu"
	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/gpuapp"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

func args(t *testing.T, k Kind, cfg *config.Config, n config.Node) []string {
	t.Helper()
	return k.Args(labstate.Dir(t.TempDir()).Node(n.Name), cfg, n, 0)
}

// A node runs dralab's drivers for what it carries, its main driver first,
// or the configuration's outside driver alone; each driver has its own
// role, files and access.
func TestKindsOfANode(t *testing.T) {
	n := config.Node{Name: "n", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, Mode: config.GPUModeDevicePlugin},
		NICs: &config.NICs{Profile: "cx7-400g", Count: 2}, CPUs: &config.CPUs{Complexes: 2, CPUsPerComplex: 8}}
	var names, roles, modes []string
	for _, k := range Of(&config.Config{}, n) {
		names, roles, modes = append(names, k.Driver(nil)), append(roles, k.Role()), append(modes, k.Mode(n))
	}
	if want := []string{gpu.DriverName, fakenic.DriverName, fakecpu.DriverName}; !slices.Equal(names, want) {
		t.Errorf("drivers %v, want %v", names, want)
	}
	if want := []string{labstate.RoleDriver, RoleNICDriver, RoleCPUDriver}; !slices.Equal(roles, want) || !slices.Equal(Roles(), append(want, RoleFabricDriver)) {
		t.Errorf("roles %v (all: %v), want %v", roles, Roles(), want)
	}
	if want := []string{config.GPUModeDevicePlugin, "dra", "dra"}; !slices.Equal(modes, want) {
		t.Errorf("modes %v, want %v", modes, want)
	}
	outside := &config.Config{Driver: &config.Driver{Name: "gpu.example.com"}}
	if ks := Of(outside, n); len(ks) != 1 || ks[0].Driver(outside) != "gpu.example.com" || ks[0].Args(labstate.NodeDir("x"), outside, n, 0) != nil {
		t.Errorf("with an outside driver a node runs %v, want the outside driver alone, with the configuration's command", ks)
	}
	if k, ok := OfDriver(fakecpu.DriverName); !ok || k.Role() != RoleCPUDriver {
		t.Errorf("OfDriver(%s) = %v, %v", fakecpu.DriverName, k, ok)
	}
	if _, ok := OfDriver("gpu.example.com"); ok {
		t.Error("OfDriver names a kind for an outside driver")
	}
	// Only the device plugin of a hollow node starts with its node: it
	// talks to its kubelet only, whose first status counts its GPUs.
	var withNode []string
	for _, k := range Of(&config.Config{}, n) {
		if k.StartsWithNode(n) {
			withNode = append(withNode, k.Driver(nil))
		}
	}
	onReal, throughDRA := n, n
	onReal.Kind = config.NodeReal
	throughDRA.GPUs = &config.GPUs{Profile: "l4-24gb", Count: 1, Mode: config.GPUModeDRA}
	if !slices.Equal(withNode, []string{gpu.DriverName}) || (gpuKind{}).StartsWithNode(onReal) || (gpuKind{}).StartsWithNode(throughDRA) {
		t.Errorf("drivers started with a hollow node: %v; want the device plugin alone, and not on a real node or through DRA", withNode)
	}
	files := labstate.NodeDir("/s/nodes/n").Driver(RoleNICDriver)
	if files.Kubeconfig != "/s/nodes/n/nic-driver.kubeconfig" || files.Checkpoint != "/s/nodes/n/nic-driver" ||
		files.Token != "/s/nodes/n/nic-driver.token" || files.Metrics != "/s/nodes/n/nic-driver-metrics-address" {
		t.Errorf("the NIC driver's files %+v are not where a lab of an earlier release keeps them", files)
	}
}

// A real node's containers get real interfaces for their NICs; a hollow
// node runs no container, so its NIC driver attaches nothing.
func TestRealNodesAttachNICInterfaces(t *testing.T) {
	nics := &config.NICs{Profile: "cx6dx-100g", Count: 2}
	real := args(t, nicKind{}, nil, config.Node{Name: "r", Kind: config.NodeReal, NICs: nics})
	hollow := args(t, nicKind{}, nil, config.Node{Name: "h", NICs: nics})
	if !slices.Contains(real, "--attach-interfaces") {
		t.Errorf("the real node's NIC driver runs with %v, without --attach-interfaces", real)
	}
	if slices.Contains(hollow, "--attach-interfaces") {
		t.Errorf("a hollow node's NIC driver runs with %v: --attach-interfaces", hollow)
	}
}

// Fake GPUs served through DRA publish their host-memory overhead where the
// lab's gate is on and the node's memory is set; counted GPUs and NVML's
// never do.
func TestHostMemoryArgs(t *testing.T) {
	dra := config.Node{Name: "a", Memory: "64Gi", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 2, Mode: config.GPUModeDRA}}
	counted := config.Node{Name: "b", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 2, Mode: config.GPUModeDevicePlugin}}
	nvmlNode := config.Node{Name: "c", GPUs: &config.GPUs{NVML: config.NVMLMockPrefix + "dgxa100", Mode: config.GPUModeDRA}}
	defaultMemory := config.Node{Name: "e", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 2, Mode: config.GPUModeDRA}}
	for _, c := range []struct {
		n        config.Node
		gate     bool
		overhead bool
	}{{dra, true, true}, {dra, false, false}, {counted, true, false}, {nvmlNode, true, false}, {defaultMemory, true, false}} {
		cfg := &config.Config{FeatureGates: map[string]bool{config.GateNodeAllocatableResources: c.gate}}
		a := args(t, gpuKind{}, cfg, c.n)
		if got := slices.Contains(a, "--host-memory-overhead"); got != c.overhead {
			t.Errorf("node %s, gate %v: driver args %v, --host-memory-overhead %v, want %v", c.n.Name, c.gate, a, got, c.overhead)
		}
	}
}

// Device metadata reaches the GPU driver of fake and NVML GPUs alike, and
// labels the node.
func TestDeviceMetadataArgs(t *testing.T) {
	cfg := &config.Config{}
	for _, g := range []*config.GPUs{{Profile: "h100-80gb", Count: 1, Mode: config.GPUModeDRA}, {NVML: config.NVMLMockPrefix + "dgxa100", Mode: config.GPUModeDRA}} {
		off := args(t, gpuKind{}, cfg, config.Node{Name: "n", GPUs: g})
		on := *g
		on.DeviceMetadata = true
		a := args(t, gpuKind{}, cfg, config.Node{Name: "n", GPUs: &on})
		if slices.Contains(off, "--device-metadata") || !slices.Contains(a, "--device-metadata") {
			t.Errorf("%+v: without %v, with %v; want --device-metadata only with", g, off, a)
		}
		if l := Labels(cfg, config.Node{Name: "n", GPUs: &on}); l[gpu.NodeDeviceMetadataLabel] != "true" {
			t.Errorf("%+v with device metadata: node labels %v, want %s=true", g, l, gpu.NodeDeviceMetadataLabel)
		}
		if l := Labels(cfg, config.Node{Name: "n", GPUs: g}); l[gpu.NodeDeviceMetadataLabel] != "" {
			t.Errorf("%+v without device metadata: node labels %v", g, l)
		}
	}
}

// A node with cpus runs the CPU driver with its complexes, its own
// kubeconfig and checkpoint.
func TestCPUArgs(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
	n := config.Node{Name: "c", CPUs: &config.CPUs{Complexes: 4, CPUsPerComplex: 16}}
	a := cpuKind{}.Args(dir.Node("c"), nil, n, 0)
	files := dir.Node("c").Driver(RoleCPUDriver)
	for _, want := range []string{"cpu", "--complexes=4", "--cpus-per-complex=16", "--kubeconfig=" + files.Kubeconfig, "--checkpoint-dir=" + files.Checkpoint} {
		if !slices.Contains(a, want) {
			t.Errorf("CPU driver args %v lack %s", a, want)
		}
	}
}

// Partitioned and time-sliced fake GPUs name their partition types where
// the lab's gate is on; whole ones never do.
func TestPartitionTypeArgs(t *testing.T) {
	mig := config.Node{Name: "m", GPUs: &config.GPUs{Profile: "a100-80gb", Count: 1, Partitioning: config.PartitioningMIG, Mode: config.GPUModeDRA}}
	whole := config.Node{Name: "w", GPUs: &config.GPUs{Profile: "a100-80gb", Count: 1, Mode: config.GPUModeDRA}}
	sliced := config.Node{Name: "s", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, TimeSlices: 2, Mode: config.GPUModeDRA}}
	for _, c := range []struct {
		n    config.Node
		gate bool
		want bool
	}{{mig, true, true}, {mig, false, false}, {whole, true, false}, {sliced, true, true}} {
		cfg := &config.Config{FeatureGates: map[string]bool{config.GatePartitionableDevicesType: c.gate}}
		if got := slices.Contains(args(t, gpuKind{}, cfg, c.n), "--partition-types"); got != c.want {
			t.Errorf("node %s, gate %v: --partition-types %v, want %v", c.n.Name, c.gate, got, c.want)
		}
	}
}

// slice is a ResourceSlice of driver's pool on node, generation gen, of
// count slices, with devices.
func slice(driver, node string, gen, count int64, devices ...resourceapi.Device) resourceapi.ResourceSlice {
	return resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: driver + "-" + node}, Spec: resourceapi.ResourceSliceSpec{
		Driver: driver, NodeName: ptr.To(node), Pool: resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: count}, Devices: devices}}
}

func devices(n int, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) []resourceapi.Device {
	var out []resourceapi.Device
	for range n {
		out = append(out, resourceapi.Device{Name: "d", Attributes: attrs})
	}
	return out
}

// A node is ready once each of its drivers has published its devices as
// its configuration says, its pools whole; until then the first driver
// that has not says what is missing, and its role names the log to read.
// The CPU driver's complexes are waited for as the NICs are.
func TestNotReadyPerKind(t *testing.T) {
	cfg := &config.Config{}
	n := config.Node{Name: "n", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 2, Mode: config.GPUModeDRA},
		NICs: &config.NICs{Profile: "cx7-400g", Count: 2}, CPUs: &config.CPUs{Complexes: 4, CPUsPerComplex: 16}}
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	whole := devices(1, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{gpu.AttrType: {StringValue: ptr.To(gpu.TypeGPU)}})
	gpus := slice(gpu.DriverName, "n", 1, 1, append(whole, whole...)...)
	nics := slice(fakenic.DriverName, "n", 1, 1, devices(2, nil)...)
	for _, c := range []struct {
		name      string
		slices    []resourceapi.ResourceSlice
		why, role string
	}{
		{"nothing published", nil, "has 0 of its 2 GPUs in ResourceSlices", labstate.RoleDriver},
		{"one GPU", []resourceapi.ResourceSlice{slice(gpu.DriverName, "n", 1, 1, whole...)}, "has 1 of its 2 GPUs in ResourceSlices", labstate.RoleDriver},
		{"GPUs, a pool of two slices half published", []resourceapi.ResourceSlice{slice(gpu.DriverName, "n", 1, 2, append(whole, whole...)...)}, "has 2 of its 2 GPUs in ResourceSlices", labstate.RoleDriver},
		{"GPUs", []resourceapi.ResourceSlice{gpus}, "has 0 of its 2 NICs in ResourceSlices", RoleNICDriver},
		{"GPUs and NICs", []resourceapi.ResourceSlice{gpus, nics}, "has 0 of its 4 CPU complexes in ResourceSlices", RoleCPUDriver},
		{"3 complexes", []resourceapi.ResourceSlice{gpus, nics, slice(fakecpu.DriverName, "n", 1, 1, devices(3, nil)...)}, "has 3 of its 4 CPU complexes in ResourceSlices", RoleCPUDriver},
		{"everything", []resourceapi.ResourceSlice{gpus, nics, slice(fakecpu.DriverName, "n", 1, 1, devices(4, nil)...)}, "", ""},
		{"everything, an older generation beside", []resourceapi.ResourceSlice{gpus, nics, slice(fakecpu.DriverName, "n", 0, 3), slice(fakecpu.DriverName, "n", 1, 1, devices(4, nil)...)}, "", ""},
	} {
		why, role := IndexSlices(c.slices).NotReady(cfg, n, node)
		if why != c.why || role != c.role {
			t.Errorf("%s: NotReady = %q (%s), want %q (%s)", c.name, why, role, c.why, c.role)
		}
	}
	// Counted GPUs are ready once allocatable.
	counted := config.Node{Name: "n", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 2, Mode: config.GPUModeDevicePlugin}}
	if why, _ := IndexSlices(nil).NotReady(cfg, counted, node); why != "has 0 of its 2 GPUs allocatable as "+gpu.ExtendedResource {
		t.Errorf("counted GPUs not allocatable: %q", why)
	}
	node.Status.Allocatable = v1.ResourceList{gpu.ExtendedResource: resource.MustParse("2")}
	if why, _ := IndexSlices(nil).NotReady(cfg, counted, node); why != "" {
		t.Errorf("counted GPUs allocatable: %q", why)
	}
	// An outside driver's node is ready with one device.
	outside := &config.Config{Driver: &config.Driver{Name: "gpu.example.com"}}
	if why, _ := IndexSlices(nil).NotReady(outside, n, node); !strings.Contains(why, "publishes no device of gpu.example.com yet") {
		t.Errorf("an outside driver with nothing published: %q", why)
	}
	if why, _ := IndexSlices([]resourceapi.ResourceSlice{slice("gpu.example.com", "n", 1, 1, devices(1, nil)...)}).NotReady(outside, n, node); why != "" {
		t.Errorf("an outside driver with a device: %q", why)
	}
}

// dralab-driver's command line is the kinds': the GPU driver's command at
// the root (as cmd/dralab-driver builds it), every other kind's under it,
// and the argv each kind gives an embedded node is one that command line
// takes (its subcommand, its flags), so that a kind's file keeps its two
// halves in step.
func TestCommandTakesEveryKindsArgs(t *testing.T) {
	root := gpuapp.NewCommand()
	root.AddCommand(Commands()...)
	var subs []string
	for _, c := range root.Commands() {
		subs = append(subs, c.Name())
	}
	if root.Name() != "dralab-driver" || !slices.Contains(subs, "nic") || !slices.Contains(subs, "cpu") {
		t.Fatalf("dralab-driver's command is %q with %v; want the GPU driver's with nic and cpu under it", root.Name(), subs)
	}
	cfg := &config.Config{}
	n := config.Node{Name: "n", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 2, Mode: config.GPUModeDRA},
		NICs: &config.NICs{Profile: "cx7-400g", Count: 2}, CPUs: &config.CPUs{Complexes: 2, CPUsPerComplex: 8},
		Topology: &config.Topology{Rack: "r1"}}
	kindsRun := 0
	for _, k := range Of(cfg, n) {
		a := args(t, k, cfg, n)
		c, rest, err := root.Find(a)
		if err != nil {
			t.Errorf("%s: dralab-driver has no command for %v: %v", k.Name(), a, err)
			continue
		}
		if own := k.Command(); (own == nil && c != root) || (own != nil && c.Name() != own.Name()) {
			t.Errorf("%s: its argv %v runs %q, not its own command", k.Name(), a, c.Name())
		}
		if err := c.ParseFlags(rest); err != nil {
			t.Errorf("%s: its command refuses its argv %v: %v", k.Name(), a, err)
		}
		kindsRun++
	}
	if kindsRun != 3 {
		t.Errorf("%d kinds run on a node with GPUs, NICs and CPUs; want 3", kindsRun)
	}
}

// register keeps the kinds in their ranks' order and refuses a rank taken
// twice: the order is the one a node's drivers start in.
func TestRegisterOrder(t *testing.T) {
	var names []string
	for _, k := range All() {
		names = append(names, k.Name())
	}
	if want := []string{"driver", "GPU driver", "NIC driver", "CPU driver", "driver of network-attached GPUs"}; !slices.Equal(names, want) {
		t.Errorf("kinds %v, want %v", names, want)
	}
	defer func() {
		if recover() == nil {
			t.Error("a rank registered twice did not panic")
		}
	}()
	saved, savedRanks := slices.Clone(kinds), slices.Clone(ranks)
	defer func() { kinds, ranks = saved, savedRanks }()
	register(20, cpuKind{})
}
