package nodedrivers

import (
	"fmt"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// outsideKind is a driver the lab's configuration brings (driver:), run
// on every node instead of dralab's drivers, with its own command line.
type outsideKind struct{}

func init() { register(0, outsideKind{}) }

// Command is nil: the configuration gives the command.
func (outsideKind) Command() *cobra.Command { return nil }

func (outsideKind) Name() string            { return "driver" }
func (outsideKind) Role() string            { return labstate.RoleDriver }
func (outsideKind) Mode(config.Node) string { return driverauth.ModeDRA }
func (outsideKind) Driver(cfg *config.Config) string {
	if cfg == nil || cfg.Driver == nil {
		return ""
	}
	return cfg.Driver.Name
}
func (outsideKind) Runs(cfg *config.Config, _ config.Node) bool { return cfg.Driver != nil }

// Args is nil: the configuration gives the command (config.Driver.Expand).
func (outsideKind) Args(labstate.NodeDir, *config.Config, config.Node, int) []string { return nil }

func (outsideKind) Labels(config.Node) map[string]string { return nil }

// DeviceClasses: an outside driver's come with its manifests.
func (outsideKind) DeviceClasses(config.Node) []resourceapi.DeviceClass { return nil }

func (outsideKind) Describe(cfg *config.Config, _ config.Node) string { return cfg.Driver.Name }

// NotReady: an outside driver's devices are its own to describe; the node
// is ready once it publishes one, its pool whole.
func (k outsideKind) NotReady(cfg *config.Config, _ config.Node, p Published) string {
	switch {
	case len(p.Devices) == 0:
		return fmt.Sprintf("publishes no device of %s yet", k.Driver(cfg))
	case !p.Complete:
		return fmt.Sprintf("has published only some of the ResourceSlices of its %s pool", k.Driver(cfg))
	}
	return ""
}

// ConformanceNeeds: none; an outside driver's devices are its own.
func (outsideKind) ConformanceNeeds(*config.Config) []Need { return nil }

func (outsideKind) StartsWithNode(config.Node) bool { return false }

// Releases: none; an outside driver's chart is its own.
func (outsideKind) Releases(*config.Config) []Release { return nil }
