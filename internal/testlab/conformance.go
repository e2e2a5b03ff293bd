package testlab

import (
	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/lab/config"
)

// ConformanceConfig is the lab the conformance suite checks the fake
// driver on: the default lab, plus a node whose H100 is cut into MIG
// devices and one whose L4 is shared by memory, so that the
// partitionable-devices and consumable-capacity checks of
// drivers/fakegpu/driver.yaml have devices to check. No other check's
// class selects a MIG device, and a claim without a capacity request takes
// a shared L4 whole.
func ConformanceConfig() (*config.Config, error) {
	cfg := config.Default()
	cfg.Nodes = append(cfg.Nodes,
		config.Node{Name: "gpu-h100-mig", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 1, Partitioning: fakegpu.PartitioningMIG}},
		config.Node{Name: "gpu-l4-shared", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, Sharing: fakegpu.SharingMemory}},
	)
	return cfg, cfg.Complete()
}
