package scratchlab

import (
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/lab/config"
)

// README's default lab lacks the GPUs three of the fake driver's
// capabilities need, and the PodGroup API a fourth needs, each named; the
// conformance lab has them all.
func TestLacks(t *testing.T) {
	m, err := manifest.Load("../../../drivers/fakegpu/driver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	lacks := Lacks(config.Default(), m)
	if got := strings.Join(lacks, "; "); len(lacks) != 4 || !strings.Contains(got, "partitioning: mig (for DRAPartitionableDevices)") ||
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
	m.Driver = "gpu.example.com"
	if lacks := Lacks(config.Default(), m); len(lacks) != 0 {
		t.Errorf("Lacks for another driver = %q, want nothing: its devices are its own", lacks)
	}
}
