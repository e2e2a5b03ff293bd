package testlab

import (
	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/lab/config"
)

// ConformanceConfig is the lab the conformance suite checks the fake
// driver on: the default lab, plus a node whose H100 is cut into MIG
// devices, one whose L4 is shared by memory and one whose H100 is
// fabric-attached, so that the partitionable-devices, consumable-capacity
// and binding-conditions checks of drivers/fakegpu/driver.yaml have
// devices to check. No other check's class selects a MIG device, a claim
// without a capacity request takes a shared L4 whole, and a pod of another
// check given the fabric H100 waits the attach delay (2 s) before it is
// bound.
func ConformanceConfig() (*config.Config, error) {
	cfg := config.Default()
	cfg.Nodes = append(cfg.Nodes,
		config.Node{Name: "gpu-h100-mig", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 1, Partitioning: fakegpu.PartitioningMIG}},
		config.Node{Name: "gpu-l4-shared", GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1, Sharing: fakegpu.SharingMemory}},
		config.Node{Name: "gpu-h100-fabric", GPUs: &config.GPUs{Profile: "h100-80gb", Count: 1, Attach: fakegpu.AttachFabric}},
	)
	return cfg, cfg.Complete()
}
