package nodedrivers

import (
	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/lab/config"
)

// Catalog is the names dralab's drivers know, which a configuration's
// devices sections are checked against (config.Config.CheckGPUs):
// lab/config depends on no driver.
var Catalog config.GPUCatalog = catalog{}

type catalog struct{}

func (catalog) Profiles() []string    { return fakegpu.BuiltinNames() }
func (catalog) MIGProfiles() []string { return fakegpu.MIGProfileNames() }
func (catalog) NVMLMocks() []string   { return nvml.MockServers }
func (catalog) NICProfiles() []string { return fakenic.ProfileNames() }
