package labserver

import (
	"slices"
	"testing"

	"github.com/dralab/dralab/drivers/fakecpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// A real node's containers get real interfaces for their NICs; a hollow
// node runs no container, so its NIC driver attaches nothing.
func TestRealNodesAttachNICInterfaces(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
	nics := &config.NICs{Profile: "cx6dx-100g", Count: 2}
	real := nicDriverArgs(dir, config.Node{Name: "r", Kind: config.NodeReal, NICs: nics}, 0)
	hollow := nicDriverArgs(dir, config.Node{Name: "h", NICs: nics}, 0)
	if !slices.Contains(real, "--attach-interfaces") {
		t.Errorf("the real node's NIC driver runs with %v, without --attach-interfaces", real)
	}
	if slices.Contains(hollow, "--attach-interfaces") {
		t.Errorf("a hollow node's NIC driver runs with %v: --attach-interfaces", hollow)
	}
}

// Fake GPUs served through DRA publish their host-memory overhead where the
// lab's gate is on and the node's memory is set; counted GPUs and NVML's
// never do. A hollow node's
// memory reaches its kubelet in bytes.
func TestHostMemoryArgs(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
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
		args := driverArgs(dir, c.n, cfg.HostMemoryOverhead(c.n), false, 0)
		if got := slices.Contains(args, "--host-memory-overhead"); got != c.overhead {
			t.Errorf("node %s, gate %v: driver args %v, --host-memory-overhead %v, want %v", c.n.Name, c.gate, args, got, c.overhead)
		}
	}
	args, err := nodeArgs(dir, config.Node{Name: "m", Memory: "64Gi"}, "ca.crt", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--memory=68719476736") {
		t.Errorf("node args %v lack --memory=68719476736", args)
	}
	args, err = nodeArgs(dir, config.Node{Name: "d"}, "ca.crt", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(args, func(a string) bool { return len(a) > 8 && a[:9] == "--memory=" }) {
		t.Errorf("a node without memory runs with %v", args)
	}
}

// Device metadata reaches the GPU driver of fake and NVML GPUs alike.
func TestDeviceMetadataArgs(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
	for _, g := range []*config.GPUs{{Profile: "h100-80gb", Count: 1, Mode: config.GPUModeDRA}, {NVML: config.NVMLMockPrefix + "dgxa100", Mode: config.GPUModeDRA}} {
		off := driverArgs(dir, config.Node{Name: "n", GPUs: g}, false, false, 0)
		on := *g
		on.DeviceMetadata = true
		args := driverArgs(dir, config.Node{Name: "n", GPUs: &on}, false, false, 0)
		if slices.Contains(off, "--device-metadata") || !slices.Contains(args, "--device-metadata") {
			t.Errorf("%+v: without %v, with %v; want --device-metadata only with", g, off, args)
		}
		if l := nodeLabels(config.Node{Name: "n", GPUs: &on}); l[gpu.NodeDeviceMetadataLabel] != "true" {
			t.Errorf("%+v with device metadata: node labels %v, want %s=true", g, l, gpu.NodeDeviceMetadataLabel)
		}
		if l := nodeLabels(config.Node{Name: "n", GPUs: g}); l[gpu.NodeDeviceMetadataLabel] != "" {
			t.Errorf("%+v without device metadata: node labels %v", g, l)
		}
	}
}

// A node with cpus runs the CPU driver with its complexes, and its kubelet
// reports their CPUs.
func TestCPUArgs(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
	n := config.Node{Name: "c", CPUs: &config.CPUs{Complexes: 4, CPUsPerComplex: 16}}
	args := cpuDriverArgs(dir, n, 0)
	for _, want := range []string{"cpu", "--complexes=4", "--cpus-per-complex=16", "--kubeconfig=" + dir.Node("c").CPUDriverKubeconfig(), "--checkpoint-dir=" + dir.Node("c").CPUDriverCheckpoint()} {
		if !slices.Contains(args, want) {
			t.Errorf("CPU driver args %v lack %s", args, want)
		}
	}
	node, err := nodeArgs(dir, n, "ca.crt", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(node, "--cpus=64") {
		t.Errorf("node args %v lack --cpus=64", node)
	}
	if config.MaxCPUComplexes != fakecpu.MaxComplexes || config.MaxCPUsPerComplex != fakecpu.MaxCPUsPerComplex {
		t.Errorf("the configuration's limits %d, %d are not the CPU driver's %d, %d", config.MaxCPUComplexes, config.MaxCPUsPerComplex, fakecpu.MaxComplexes, fakecpu.MaxCPUsPerComplex)
	}
}

// Partitioned and time-sliced fake GPUs name their partition types where
// the lab's gate is on; whole ones never do.
func TestPartitionTypeArgs(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
	mig := config.Node{Name: "m", GPUs: &config.GPUs{Profile: "a100-80gb", Count: 1, Partitioning: config.PartitioningMIG, Mode: config.GPUModeDRA}}
	whole := config.Node{Name: "w", GPUs: &config.GPUs{Profile: "a100-80gb", Count: 1, Mode: config.GPUModeDRA}}
	sliced := config.Node{Name: "s", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, TimeSlices: 2, Mode: config.GPUModeDRA}}
	for _, c := range []struct {
		n    config.Node
		gate bool
		want bool
	}{{mig, true, true}, {mig, false, false}, {whole, true, false}, {sliced, true, true}} {
		if got := slices.Contains(driverArgs(dir, c.n, false, c.gate, 0), "--partition-types"); got != c.want {
			t.Errorf("node %s, gate %v: --partition-types %v, want %v", c.n.Name, c.gate, got, c.want)
		}
	}
}
