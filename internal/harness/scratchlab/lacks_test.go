package scratchlab

import (
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/lab/config"
)

// README's default lab lacks the GPUs five of the fake driver's
// capabilities need, the PodGroup API a sixth needs and the gate of a
// seventh, each named; the conformance lab has them all. For the NIC
// driver's manifest it lacks NICs as well.
func TestLacks(t *testing.T) {
	m, err := manifest.Load("../../../drivers/fakegpu/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lacks := Lacks(config.Default(), m)
	if got := strings.Join(lacks, "; "); len(lacks) != 7 || !strings.Contains(got, "featureGates DRANodeAllocatableResources (for DRANodeAllocatableResources)") || !strings.Contains(got, "featureGates DRADerivedAttributes (for DRADerivedAttributes)") || !strings.Contains(got, "deviceMetadata: true (for DeviceMetadata)") || !strings.Contains(got, "partitioning: mig (for DRAPartitionableDevices)") ||
		!strings.Contains(got, "sharing: memory (for DRAConsumableCapacity)") || !strings.Contains(got, "attach: fabric (for DRADeviceBindingConditions)") ||
		!strings.Contains(got, "GenericWorkload and DRAWorkloadResourceClaims, runtimeConfig scheduling.k8s.io/v1beta1) (for DRAWorkloadResourceClaims)") {
		t.Errorf("Lacks(default lab) = %q, want the MIG, shared and fabric GPUs and the PodGroup API", got)
	}
	workloads, err := config.Load("../../../lab/examples/workloads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(Lacks(workloads, m), "; "); strings.Contains(got, "PodGroup") {
		t.Errorf("Lacks(workloads lab) = %q: it serves the PodGroup API", got)
	}
	cfg, err := ConformanceConfig()
	if err != nil {
		t.Fatal(err)
	}
	if lacks := Lacks(cfg, m); len(lacks) != 0 {
		t.Errorf("Lacks(conformance lab) = %q, want nothing", lacks)
	}
	nic, err := manifest.Load("../../../drivers/fakenic/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(Lacks(config.Default(), nic), "; "); !strings.Contains(got, "NICs (nics on a node) (for nic.dralab.dev)") ||
		!strings.Contains(got, "featureGates DRAListTypeAttributes (for DRAListTypeAttributes)") || !strings.Contains(got, "skipNodeOperations") || strings.Contains(got, "mig") {
		t.Errorf("Lacks(default lab, NIC driver) = %q, want NICs, the gates and a node of NICs that skip node operations, no GPU", got)
	}
	gpuNIC, err := config.Load("../../../lab/examples/gpu-nic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := Lacks(gpuNIC, nic); len(got) != 1 || !strings.Contains(got[0], "(for DRAWorkloadResourceClaims)") {
		t.Errorf("Lacks(gpu-nic lab, NIC driver) = %q, want the PodGroup API only", got)
	}
	if lacks := Lacks(cfg, nic); len(lacks) != 0 {
		t.Errorf("Lacks(conformance lab, NIC driver) = %q, want nothing", lacks)
	}
	m.Driver = "gpu.example.com"
	if lacks := Lacks(config.Default(), m); len(lacks) != 0 {
		t.Errorf("Lacks for another driver = %q, want nothing: its devices are its own", lacks)
	}
}
