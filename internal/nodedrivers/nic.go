package nodedrivers

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/nicapp"
	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// RoleNICDriver is the NIC driver's process role on a node.
const RoleNICDriver = "nic-driver"

// Node labels of a node with NICs: the NIC driver's release reads the
// profile and count (the chart's nic.profileLabel and nic.nicsLabel) and
// runs on the nodes LabelNICDriver selects.
const (
	LabelNICProfile = "nic.dralab.dev/profile"
	LabelNICs       = "nic.dralab.dev/nics"
	LabelNICDriver  = "dralab.dev/nic-driver"
)

// nicKind is dralab's NIC driver (nic.dralab.dev), `dralab-driver nic`.
type nicKind struct{}

func init() { register(20, nicKind{}) }

func (nicKind) Command() *cobra.Command { return nicapp.NewCommand() }

func (nicKind) Name() string                 { return "NIC driver" }
func (nicKind) Role() string                 { return RoleNICDriver }
func (nicKind) Driver(*config.Config) string { return fakenic.DriverName }
func (nicKind) Mode(config.Node) string      { return driverauth.ModeDRA }
func (nicKind) Runs(cfg *config.Config, n config.Node) bool {
	return cfg.Driver == nil && n.NICs != nil
}

// Args runs the NIC driver with its own ServiceAccount token and
// checkpoint, and the node's place.
func (k nicKind) Args(nd labstate.NodeDir, _ *config.Config, n config.Node, verbosity int) []string {
	args := []string{"nic", "--profile=" + n.NICs.Profile, "--nics=" + strconv.Itoa(n.NICs.Count)}
	if n.NICs.SkipNodeOperations {
		args = append(args, "--skip-node-operations")
	}
	if n.NICs.NUMANodeList {
		args = append(args, "--numa-list")
	}
	if n.Kind == config.NodeReal {
		// Its containers are real: each gets a real interface per NIC.
		args = append(args, "--attach-interfaces")
	}
	args = append(args, topologyArgs(n.Topology)...)
	return append(args, kubeletArgs(nd, k.Role(), n, verbosity)...)
}

func (nicKind) Labels(n config.Node) map[string]string {
	return map[string]string{LabelNICProfile: n.NICs.Profile, LabelNICs: strconv.Itoa(n.NICs.Count), LabelNICDriver: "true"}
}

func (nicKind) DeviceClasses(config.Node) []resourceapi.DeviceClass { return fakenic.DeviceClasses() }

func (nicKind) Describe(_ *config.Config, n config.Node) string {
	return fmt.Sprintf("%d× %s NICs", n.NICs.Count, n.NICs.Profile)
}

func (nicKind) NotReady(_ *config.Config, n config.Node, p Published) string {
	if len(p.Devices) != n.NICs.Count || !p.Complete {
		return fmt.Sprintf("has %d of its %d NICs in ResourceSlices", len(p.Devices), n.NICs.Count)
	}
	return ""
}

// ConformanceNeeds: NICs on a node, and for node operations skipped, a
// node whose NICs skip them.
func (nicKind) ConformanceNeeds(cfg *config.Config) []Need {
	var nics, quiet bool
	for _, n := range cfg.Nodes {
		if n.NICs != nil {
			nics = true
			quiet = quiet || n.NICs.SkipNodeOperations
		}
	}
	needs := append([]Need{{"", nics, "NICs (nics on a node)"}}, groupNeeds(cfg)...)
	return append(needs, Need{manifest.DRAOptionalNodeOperations, quiet && cfg.FeatureGates[config.GateOptionalNodeOperations], "NICs with skipNodeOperations (and featureGates " + config.GateOptionalNodeOperations + ")"})
}

func (nicKind) StartsWithNode(config.Node) bool { return false }

// Releases: one, `dralab-driver nic` on the nodes with NICs (LabelNICDriver),
// which read their NICs' profile and count from their labels.
func (nicKind) Releases(cfg *config.Config) []Release {
	serves := func(n config.Node) bool { return n.NICs != nil }
	if !slices.ContainsFunc(cfg.Nodes, serves) {
		return nil
	}
	return []Release{{Name: "dralab-driver-nic", Serves: serves, Values: map[string]any{
		"driver":       "nic",
		"nodeSelector": map[string]any{LabelNICDriver: "true"},
		"nic":          map[string]any{"profileLabel": LabelNICProfile, "nicsLabel": LabelNICs},
	}}}
}
