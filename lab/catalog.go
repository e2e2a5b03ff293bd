package lab

import (
	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/nvml"
)

// gpuCatalog is the GPU driver's names, which a configuration's GPUs
// sections are checked against (config.GPUCatalog): lab/config depends on
// no driver, the lab on both.
type gpuCatalog struct{}

func (gpuCatalog) Profiles() []string    { return fakegpu.BuiltinNames() }
func (gpuCatalog) MIGProfiles() []string { return fakegpu.MIGProfileNames() }
func (gpuCatalog) NVMLMocks() []string   { return nvml.MockServers }
func (gpuCatalog) NICProfiles() []string { return fakenic.ProfileNames() }
