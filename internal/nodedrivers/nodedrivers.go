// Package nodedrivers is the home of each kind of device a lab node may
// carry (GPUs, NICs, CPU complexes, or an outside driver's devices): what
// its driver is called and how it is granted access, whether a node runs
// it, how the embedded lab starts it, the labels it puts on its node, what
// the lab's status says of it and when its devices count as published.
// The backends, the lab process, readiness and status ask here instead of
// branching on the kinds, and dralab-driver takes each kind's command
// (but the GPU driver's, its own) from here. Adding a kind is its driver,
// its command, one file here (which registers the kind) and its node
// section in lab/config.
package nodedrivers

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// A Kind is a kind of device a lab node may carry, with the driver that
// publishes it.
type Kind interface {
	// Name names the kind's driver in messages ("GPU driver").
	Name() string
	// Role is the driver's process role on a node. It names the driver's
	// files in the node's state (labstate.NodeDir.Driver) and its log.
	Role() string
	// Driver is the DRA driver's name in the lab.
	Driver(cfg *config.Config) string
	// Runs tells whether node n runs the kind's driver.
	Runs(cfg *config.Config, n config.Node) bool
	// Mode is the driver's access on node n: driverauth.ModeDRA, or
	// driverauth.ModeDevicePlugin for counted GPUs.
	Mode(n config.Node) string
	// StartsWithNode tells whether the driver on node n needs no API
	// server, so that the lab starts it with the node, before the control
	// plane (a device plugin on a hollow node, which the kubelet counts in
	// its first status).
	StartsWithNode(n config.Node) bool
	// Args is the command line of dralab-driver that runs the kind's
	// driver on an embedded node; nil for a driver whose command the
	// configuration gives (config.Driver).
	Args(nd labstate.NodeDir, cfg *config.Config, n config.Node, verbosity int) []string
	// Labels are the labels the kind puts on node n, on either backend.
	Labels(n config.Node) map[string]string
	// DeviceClasses are the driver's DeviceClasses, which the lab creates
	// as its chart does on other clusters, where node n runs it.
	DeviceClasses(n config.Node) []resourceapi.DeviceClass
	// Describe says what node n carries of the kind ("8× cx7-400g NICs").
	Describe(cfg *config.Config, n config.Node) string
	// NotReady says what node n still lacks of the kind's devices, "" once
	// they are published as its configuration says.
	NotReady(cfg *config.Config, n config.Node, p Published) string
	// Releases are the releases of the driver chart (charts/dralab-driver)
	// that run the kind's driver on a kind lab's nodes, one DaemonSet each;
	// none where no node runs it (a kind the kind backend does not run is
	// refused by lab/config's limits first).
	Releases(cfg *config.Config) []Release
	// ConformanceNeeds are what a lab of cfg must have for the
	// conformance suite to check the kind's driver, capability by
	// capability; nil where the kind's devices are the driver's own (the
	// lab cannot give them what they lack).
	ConformanceNeeds(cfg *config.Config) []Need
	// Command is the dralab-driver command that runs the kind's driver,
	// which Args' flags are for; nil for the GPU driver (dralab-driver
	// itself, the root command) and for a driver the configuration
	// brings.
	Command() *cobra.Command
}

// fileWriter is a kind whose driver reads files that the lab writes
// before it starts the driver on a node.
type fileWriter interface {
	WriteFiles(nd labstate.NodeDir, cfg *config.Config, n config.Node) error
}

// WriteFiles writes the files kind k's driver on node n reads, where it
// reads any.
func WriteFiles(k Kind, nd labstate.NodeDir, cfg *config.Config, n config.Node) error {
	if w, ok := k.(fileWriter); ok {
		return w.WriteFiles(nd, cfg, n)
	}
	return nil
}

// A Release is a release of the driver chart that runs a kind's driver on
// a kind lab's nodes: its name, its values but the driver image's, and the
// nodes its DaemonSet runs on (selected by the labels Kind.Labels sets).
type Release struct {
	Name   string
	Values map[string]any
	Serves func(n config.Node) bool
}

// DaemonSet is the release's DaemonSet, as the chart names it.
func (r Release) DaemonSet() string { return r.Name + "-dralab-driver" }

// Releases are every kind's releases for the lab's nodes, in the kinds'
// order.
func Releases(cfg *config.Config) []Release {
	var out []Release
	for _, k := range kinds {
		out = append(out, k.Releases(cfg)...)
	}
	return out
}

// ReleaseOf is the release whose DaemonSet runs the driver of a role on
// node n, and whether there is one.
func ReleaseOf(cfg *config.Config, n config.Node, role string) (Release, bool) {
	for _, k := range Of(cfg, n) {
		if k.Role() != role {
			continue
		}
		for _, r := range k.Releases(cfg) {
			if r.Serves(n) {
				return r, true
			}
		}
	}
	return Release{}, false
}

// A Need is what a lab must have for the conformance suite to check a
// capability of a driver (any capability the manifest enables, when
// Capability is empty), whether the lab has it, and what it is, as the
// lab's configuration says it.
type Need struct {
	Capability manifest.Capability
	Has        bool
	What       string
}

// groupNeeds are what every kind of dralab's drivers needs of the lab's
// API for the capabilities that are the API server's and scheduler's.
func groupNeeds(cfg *config.Config) []Need {
	gate := func(name string) bool { return cfg.FeatureGates[name] }
	return []Need{
		{manifest.DRAWorkloadResourceClaims, cfg.ServesGroupClaims(), "the PodGroup API (featureGates " + config.GateGenericWorkload + " and " + config.GateDRAWorkloadResourceClaims + ", runtimeConfig " + config.WorkloadAPIVersion + ")"},
		{manifest.DRADerivedAttributes, gate(config.GateDerivedAttributes), "featureGates " + config.GateDerivedAttributes},
		{manifest.DRAListTypeAttributes, gate(config.GateListTypeAttributes), "featureGates " + config.GateListTypeAttributes},
	}
}

// Published is what a node shows of one driver: the node itself (its
// allocatable, for counted devices), the devices of the driver's
// ResourceSlices in the node's pools, and whether those pools are
// published whole.
type Published struct {
	Node     *v1.Node
	Devices  []resourceapi.Device
	Complete bool
}

// kinds are every kind, in the order a node's drivers start and are
// reported: the node's main driver (dralab's GPU driver or an outside
// driver, of role labstate.RoleDriver) first. Each kind's file registers
// it with its rank in that order.
var (
	kinds []Kind
	ranks []int
)

// register adds kind k at rank in the kinds' order; a rank is one kind's.
func register(rank int, k Kind) {
	i, found := slices.BinarySearch(ranks, rank)
	if found {
		panic(fmt.Sprintf("nodedrivers: %s and %s both take rank %d", kinds[i].Name(), k.Name(), rank))
	}
	ranks = slices.Insert(ranks, i, rank)
	kinds = slices.Insert(kinds, i, k)
}

// Commands are the dralab-driver commands of the kinds that run under the
// GPU driver's (`dralab-driver nic`, `dralab-driver cpu`): dralab-driver
// adds each kind's from here.
func Commands() []*cobra.Command {
	var out []*cobra.Command
	for _, k := range kinds {
		if c := k.Command(); c != nil {
			out = append(out, c)
		}
	}
	return out
}

// All returns every kind.
func All() []Kind { return slices.Clone(kinds) }

// Of returns the kinds whose drivers node n runs.
func Of(cfg *config.Config, n config.Node) []Kind {
	var out []Kind
	for _, k := range kinds {
		if k.Runs(cfg, n) {
			out = append(out, k)
		}
	}
	return out
}

// Roles are the roles of every kind's driver, each once.
func Roles() []string {
	var out []string
	for _, k := range kinds {
		if !slices.Contains(out, k.Role()) {
			out = append(out, k.Role())
		}
	}
	return out
}

// OfDriver returns the kind of dralab's driver of that name, and whether
// there is one; any other name is the node's main driver's (an outside
// driver's).
func OfDriver(driver string) (Kind, bool) {
	for _, k := range kinds {
		if k.Driver(nil) == driver {
			return k, true
		}
	}
	return nil, false
}

// Labels are the labels node n registers with: its configured labels,
// its topology's, and those of every kind of device it carries.
func Labels(cfg *config.Config, n config.Node) map[string]string {
	labels := map[string]string{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	for k, v := range n.Topology.Labels() {
		labels[k] = v
	}
	for _, k := range Of(cfg, n) {
		for key, v := range k.Labels(n) {
			labels[key] = v
		}
	}
	return labels
}

// kubeletArgs are the flags of dralab-driver that tell a driver of role
// where the node's kubelet, runtime and its own files are.
func kubeletArgs(nd labstate.NodeDir, role string, n config.Node, verbosity int) []string {
	files := nd.Driver(role)
	return []string{
		"--node-name=" + n.Name,
		"--kubeconfig=" + files.Kubeconfig,
		"--kubelet-registrar-dir=" + nd.PluginsRegistry(),
		"--kubelet-plugins-dir=" + nd.Plugins(),
		"--cdi-dir=" + nd.CDI(),
		"--checkpoint-dir=" + files.Checkpoint,
		"--v=" + strconv.Itoa(verbosity),
	}
}

// topologyArgs place a driver's devices in the node's rack and NVLink
// domain.
func topologyArgs(t *config.Topology) []string {
	var out []string
	if t != nil && t.Rack != "" {
		out = append(out, "--rack="+t.Rack)
	}
	if t != nil && t.NVLinkDomain != "" {
		out = append(out, "--nvlink-domain="+t.NVLinkDomain)
	}
	return out
}

// MetricsAddresses reads the metrics addresses (host:port) the node's
// drivers were started with, by driver name: dralab's drivers', each only
// where the node runs it.
func MetricsAddresses(nd labstate.NodeDir) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range kinds {
		driver := k.Driver(nil)
		if driver == "" {
			continue // an outside driver's metrics are its own
		}
		data, err := os.ReadFile(nd.Driver(k.Role()).Metrics)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, err
		default:
			out[driver] = strings.TrimSpace(string(data))
		}
	}
	return out, nil
}

// DeviceClasses are the DeviceClasses of the drivers of the lab's nodes,
// each driver's once.
func DeviceClasses(cfg *config.Config) []resourceapi.DeviceClass {
	var out []resourceapi.DeviceClass
	seen := map[string]bool{}
	for _, n := range cfg.Nodes {
		for _, k := range Of(cfg, n) {
			if classes := k.DeviceClasses(n); len(classes) > 0 && !seen[k.Driver(cfg)] {
				seen[k.Driver(cfg)] = true
				out = append(out, classes...)
			}
		}
	}
	return out
}
