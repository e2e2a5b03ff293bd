package nodedrivers

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/cpuapp"
	"github.com/dralab/dralab/drivers/fakecpu"
	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// RoleCPUDriver is the CPU driver's process role on a node.
const RoleCPUDriver = "cpu-driver"

// cpuKind is dralab's CPU driver (cpu.dralab.dev), `dralab-driver cpu`: a
// hollow node's core complexes, each accounting its share of the node's
// cpu.
type cpuKind struct{}

func init() { register(30, cpuKind{}) }

func (cpuKind) Command() *cobra.Command { return cpuapp.NewCommand() }

func (cpuKind) Name() string                 { return "CPU driver" }
func (cpuKind) Role() string                 { return RoleCPUDriver }
func (cpuKind) Driver(*config.Config) string { return fakecpu.DriverName }
func (cpuKind) Mode(config.Node) string      { return driverauth.ModeDRA }
func (cpuKind) Runs(cfg *config.Config, n config.Node) bool {
	return cfg.Driver == nil && n.CPUs != nil
}

// Args runs the CPU driver with its own ServiceAccount token and
// checkpoint.
func (k cpuKind) Args(nd labstate.NodeDir, _ *config.Config, n config.Node, verbosity int) []string {
	args := []string{"cpu", "--complexes=" + strconv.Itoa(n.CPUs.Complexes), "--cpus-per-complex=" + strconv.Itoa(n.CPUs.CPUsPerComplex)}
	return append(args, kubeletArgs(nd, k.Role(), n, verbosity)...)
}

func (cpuKind) Labels(config.Node) map[string]string { return nil }

func (cpuKind) DeviceClasses(config.Node) []resourceapi.DeviceClass { return fakecpu.DeviceClasses() }

func (cpuKind) Describe(_ *config.Config, n config.Node) string {
	return fmt.Sprintf("%d× %d-CPU complexes", n.CPUs.Complexes, n.CPUs.CPUsPerComplex)
}

func (cpuKind) NotReady(_ *config.Config, n config.Node, p Published) string {
	if len(p.Devices) != n.CPUs.Complexes || !p.Complete {
		return fmt.Sprintf("has %d of its %d CPU complexes in ResourceSlices", len(p.Devices), n.CPUs.Complexes)
	}
	return ""
}

// ConformanceNeeds: none yet; the conformance lab has no CPU complexes.
func (cpuKind) ConformanceNeeds(*config.Config) []Need { return nil }

func (cpuKind) StartsWithNode(config.Node) bool { return false }

// Releases: none; the kind backend runs no CPU driver (lab/config's limits).
func (cpuKind) Releases(*config.Config) []Release { return nil }
