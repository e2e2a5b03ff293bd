package nodedrivers

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// gpuKind is dralab's GPU driver (gpu.dralab.dev): fake GPUs of a profile
// or NVML's, served through DRA or counted by its device plugin.
type gpuKind struct{}

func init() { register(10, gpuKind{}) }

// Command is nil: the GPU driver's command is dralab-driver itself
// (cmd/dralab-driver's root), and it links NVML, which no binary of the
// lab's may (its progress lines' Helm links Go's plugin package).
func (gpuKind) Command() *cobra.Command { return nil }

func (gpuKind) Name() string                 { return "GPU driver" }
func (gpuKind) Role() string                 { return labstate.RoleDriver }
func (gpuKind) Driver(*config.Config) string { return gpu.DriverName }
func (gpuKind) Mode(n config.Node) string    { return n.GPUs.Mode }
func (gpuKind) Runs(cfg *config.Config, n config.Node) bool {
	return cfg.Driver == nil && n.GPUs != nil
}

// Args runs the GPU driver, its ServiceAccount token bound to the node:
// what its chart grants a DaemonSet. The lab's DRANodeAllocatableResources
// gate has fake GPUs served through DRA publish their profile's
// host-memory overhead; its DRAPartitionableDevicesType gate has
// partitioned or time-sliced fake GPUs name their partition types.
func (k gpuKind) Args(nd labstate.NodeDir, cfg *config.Config, n config.Node, verbosity int) []string {
	g := n.GPUs
	args := []string{"--inventory=fake", "--profile=" + g.Profile, "--gpus=" + strconv.Itoa(g.Count)}
	for _, s := range settings(g) {
		args = append(args, "--"+s.flag+"="+s.value)
	}
	if cfg.HostMemoryOverhead(n) && g.Mode != config.GPUModeDevicePlugin {
		args = append(args, "--host-memory-overhead")
	}
	if cfg.GateEnabled(config.GatePartitionableDevicesType) && (g.Partitioning != "" || g.TimeSlices > 0) {
		args = append(args, "--partition-types")
	}
	if g.NVML != "" {
		args = []string{"--inventory=nvml", "--nvml=" + nvml.SourceOf(g.NVML)}
	}
	if g.DeviceMetadata {
		args = append(args, "--device-metadata")
	}
	args = append(args, topologyArgs(n.Topology)...)
	args = append(args, kubeletArgs(nd, k.Role(), n, verbosity)...)
	return append(args,
		"--mode="+g.Mode,
		"--kubelet-device-plugins-dir="+DevicePluginsDir(n, nd),
		"--faults-file="+nd.GPUFaults(),
	)
}

// DevicePluginsDir is where a node's kubelet serves the device-plugin
// Registration service: the kubelet's fixed host path (the device-plugin
// API's, which the kubelet compiles in whatever its --root-dir) for the
// real kubelet.
func DevicePluginsDir(n config.Node, nd labstate.NodeDir) string {
	if n.Kind == config.NodeReal {
		return strings.TrimSuffix(pluginapi.DevicePluginPath, "/")
	}
	return nd.DevicePlugins()
}

// Labels name the node's GPU profile and count and how its GPUs are
// served, which the chart's driver reads on kind.
func (gpuKind) Labels(n config.Node) map[string]string {
	labels := map[string]string{gpu.NodeModeLabel: n.GPUs.Mode, NVMLLabel: nvmlLabelValue(n.GPUs)}
	if n.GPUs.Profile != "" {
		labels[gpu.NodeProfileLabel] = n.GPUs.Profile
	}
	if n.GPUs.Count > 0 {
		labels[gpu.NodeGPUsLabel] = strconv.Itoa(n.GPUs.Count)
	}
	if n.GPUs.DeviceMetadata {
		labels[gpu.NodeDeviceMetadataLabel] = "true"
	}
	return labels
}

// DeviceClasses: counted GPUs are no DRA devices.
func (gpuKind) DeviceClasses(n config.Node) []resourceapi.DeviceClass {
	if n.GPUs.Mode != config.GPUModeDRA {
		return nil
	}
	return gpu.DeviceClasses()
}

func (gpuKind) Describe(_ *config.Config, n config.Node) string {
	if n.GPUs.NVML != "" {
		return fmt.Sprintf("NVML %s (%s)", n.GPUs.NVML, n.GPUs.Mode)
	}
	return fmt.Sprintf("%d× %s (%s)", n.GPUs.Count, n.GPUs.Profile, n.GPUs.Mode)
}

// NotReady: a DRA node's whole GPUs are all published, each as the
// configuration promises, with its MIG devices and time-sliced shares; a
// counting node's are allocatable. An NVML node's count is NVML's: one
// GPU will do.
func (gpuKind) NotReady(_ *config.Config, n config.Node, p Published) string {
	g := n.GPUs
	allocatable := p.Node.Status.Allocatable[v1.ResourceName(gpu.ExtendedResource)]
	whole, kept, parts, shares := 0, 0, 0, 0
	for _, d := range p.Devices {
		switch ptr.Deref(d.Attributes[gpu.AttrType].StringValue, "") {
		case gpu.TypeGPU:
			whole++
			if promised(g, d) {
				kept++
			}
		case gpu.TypeMIG:
			parts++
		case gpu.TypeTimeSlice:
			shares++
		}
	}
	switch {
	case g.NVML != "":
		if (g.Mode == config.GPUModeDRA && len(p.Devices) == 0) || (g.Mode == config.GPUModeDevicePlugin && allocatable.Value() == 0) {
			return fmt.Sprintf("has no GPUs from NVML (%s) yet", g.NVML)
		}
		if g.Mode == config.GPUModeDRA && !p.Complete {
			return fmt.Sprintf("has published only some of its ResourceSlices of GPUs from NVML (%s)", g.NVML)
		}
	case g.Mode == config.GPUModeDevicePlugin:
		if allocatable.Value() != int64(g.Count) {
			return fmt.Sprintf("has %d of its %d GPUs allocatable as %s", allocatable.Value(), g.Count, gpu.ExtendedResource)
		}
	case whole != g.Count || !p.Complete:
		return fmt.Sprintf("has %d of its %d GPUs in ResourceSlices", whole, g.Count)
	case kept != g.Count || g.Partitioning == config.PartitioningMIG && parts == 0 || shares != g.Count*g.TimeSlices:
		return fmt.Sprintf("has %d of its %d GPUs published as its configuration says (%s), with %d MIG devices and %d of %d time-sliced shares",
			kept, g.Count, promises(g), parts, shares, g.Count*g.TimeSlices)
	}
	return ""
}

// promised reports whether a whole GPU is published as the node's GPUs
// promise: consuming its counters when partitioned, allowing several
// allocations when shared, with binding conditions when fabric-attached.
// A lab that is Ready then has every device its scenarios require, so a
// driver that stops publishing them fails lab:up rather than skip them.
func promised(g *config.GPUs, d resourceapi.Device) bool {
	return (g.Partitioning != config.PartitioningMIG && g.TimeSlices == 0 || len(d.ConsumesCounters) > 0) &&
		(g.Sharing != config.SharingMemory || ptr.Deref(d.AllowMultipleAllocations, false)) &&
		(g.Attach != config.AttachFabric || len(d.BindingConditions) > 0)
}

// promises says what promised checks, in the configuration's words.
func promises(g *config.GPUs) string {
	var out []string
	for _, s := range settings(g) {
		out = append(out, s.field+": "+s.value)
	}
	if len(out) == 0 {
		return "whole GPUs"
	}
	return strings.Join(out, ", ")
}

// setting is a GPUs section's setting that the driver takes as a flag:
// the field's name, the flag's and the value.
type setting struct{ field, flag, value string }

// settings are the section's settings that are set, in the
// configuration's order.
func settings(g *config.GPUs) []setting {
	var out []setting
	for _, s := range []setting{
		{"partitioning", "partitioning", g.Partitioning},
		{"sharing", "sharing", g.Sharing},
		{"attach", "attach", g.Attach},
		{"timeSlices", "time-slices", strconv.Itoa(g.TimeSlices)},
		{"devicesPerSlice", "devices-per-slice", strconv.Itoa(g.DevicesPerSlice)},
		{"sliceWriteInterval", "slice-write-interval", g.SliceWriteInterval},
	} {
		if s.value != "" && s.value != "0" {
			out = append(out, s)
		}
	}
	return out
}

// ConformanceNeeds: the fake GPU's capabilities each need a node whose
// GPUs have them (NVML's GPUs have none of the fake ones; counted GPUs
// have no DRA devices).
func (gpuKind) ConformanceNeeds(cfg *config.Config) []Need {
	var mig, shared, fabric, metadata, overhead bool
	for _, n := range cfg.Nodes {
		if g := n.GPUs; g != nil && g.NVML == "" && g.Mode != config.GPUModeDevicePlugin {
			overhead = overhead || cfg.HostMemoryOverhead(n)
			mig = mig || g.Partitioning == config.PartitioningMIG
			shared = shared || g.Sharing == config.SharingMemory
			fabric = fabric || g.Attach == config.AttachFabric
		}
		if g := n.GPUs; g != nil && g.Mode != config.GPUModeDevicePlugin {
			metadata = metadata || g.DeviceMetadata
		}
	}
	return append([]Need{
		{manifest.DRAPartitionableDevices, mig, "a GPU with partitioning: mig"},
		{manifest.DRAConsumableCapacity, shared, "a GPU with sharing: memory"},
		{manifest.DRADeviceBindingConditions, fabric, "a GPU with attach: fabric"},
		{manifest.DeviceMetadata, metadata, "a GPU with deviceMetadata: true"},
		{manifest.DRANodeAllocatableResources, overhead, "a GPU node with memory (its GPUs' host memory overhead) and featureGates " + config.GateNodeAllocatableResources},
	}, groupNeeds(cfg)...)
}

// StartsWithNode: counted GPUs on a hollow node are served by a device
// plugin, which talks to its kubelet only.
func (gpuKind) StartsWithNode(n config.Node) bool {
	return n.Kind != config.NodeReal && n.GPUs != nil && n.GPUs.Mode == config.GPUModeDevicePlugin
}

// Releases: one per GPU mode the lab's nodes use, sorted, each on the nodes
// of its mode, which read their GPUs' profile and count from their labels.
// The DRA release takes gpu:fail's faults; counting mode's makes no
// DeviceClasses and no admission policy (its GPUs are not DRA's).
func (k gpuKind) Releases(cfg *config.Config) []Release {
	// One release per way of serving GPUs (DRA or counted) and source of
	// GPUs (a profile's fake ones, or an NVML: the host's or a mock
	// server's), each selecting its nodes by their labels.
	type group struct{ mode, nvml string }
	var groups []group
	for _, n := range cfg.Nodes {
		if !k.Runs(cfg, n) {
			continue
		}
		if g := (group{n.GPUs.Mode, n.GPUs.NVML}); !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	slices.SortFunc(groups, func(a, b group) int { return strings.Compare(a.nvml+"/"+a.mode, b.nvml+"/"+b.mode) })
	var out []Release
	for _, g := range groups {
		source := nvmlLabelValue(&config.GPUs{NVML: g.nvml})
		v := map[string]any{
			"mode":         g.mode,
			"nodeSelector": map[string]any{gpu.NodeModeLabel: g.mode, NVMLLabel: source},
			"fake":         map[string]any{"profileLabel": gpu.NodeProfileLabel, "gpusLabel": gpu.NodeGPUsLabel},
		}
		name := "dralab-driver-" + g.mode
		switch g.nvml {
		case "":
		case config.NVMLHost:
			// The host's library, which a kind node holds under a driver
			// root of its own; the device files at their host paths.
			v["inventory"] = "nvml"
			v["nvml"] = map[string]any{"source": "library", "driverRoot": HostDriverRoot}
			name = "dralab-driver-nvml-" + source + "-" + g.mode
		default:
			v["inventory"] = "nvml"
			v["nvml"] = map[string]any{"source": g.nvml}
			name = "dralab-driver-nvml-" + source + "-" + g.mode
		}
		if g.mode == config.GPUModeDRA {
			v["faultInjection"] = true
		} else {
			v["deviceClasses"] = map[string]any{"create": false}
			v["validatingAdmissionPolicy"] = map[string]any{"enabled": false}
		}
		out = append(out, Release{Name: name, Values: v,
			Serves: func(n config.Node) bool { return n.GPUs != nil && n.GPUs.Mode == g.mode && n.GPUs.NVML == g.nvml }})
	}
	if len(out) > 1 {
		// Each DeviceClass once: the first DRA release creates them.
		created := false
		for _, r := range out {
			if r.Values["mode"] != config.GPUModeDRA {
				continue
			}
			if created {
				r.Values["deviceClasses"] = map[string]any{"create": false}
				r.Values["validatingAdmissionPolicy"] = map[string]any{"enabled": false}
			}
			created = true
		}
	}
	return out
}

// HostDriverRoot is where a kind node of the host's GPUs holds the
// directory of the host's NVML library (mounted read-only at the same
// path under it), as NVIDIA's driver containers lay out a driver root: the
// chart's driver (nvml.driverRoot) finds libnvidia-ml.so.1 there.
const HostDriverRoot = "/run/nvidia/driver"

// NVMLLibraryDir is the directory, relative to the driver root root ("/"
// on a host with NVIDIA's driver installed), of NVIDIA's NVML library.
func NVMLLibraryDir(root string) (string, error) { return nvml.FindLibrary(root) }

// NVMLLabel names, on kind, where a node's GPUs come from: "fake" (a
// profile's), "host" (the machine's NVML) or "mock-<server>" (a go-nvml
// mock server's). The GPU driver's releases select their nodes by it.
const NVMLLabel = "gpu.dralab.dev/nvml"

// nvmlLabelValue is a node's NVMLLabel value (a label value has no ':').
func nvmlLabelValue(g *config.GPUs) string {
	switch {
	case g.NVML == "":
		return "fake"
	case g.NVML == config.NVMLHost:
		return "host"
	}
	return "mock-" + strings.TrimPrefix(g.NVML, config.NVMLMockPrefix)
}

// Vocabulary is how the lab names its devices where it reads allocations
// (its scenarios, dashboard, soak and tests): dralab's GPUs by tier (the
// tier selectors of drivers/gpu, so NVML's GPUs too), a counting node's
// GPUs by its profile label's tier, MIG devices by profile, and the GPU
// driver's device types, time slices among them.
var Vocabulary = allocation.Vocabulary{
	Tier: func(ctx context.Context, driver string, dev *resourceapi.Device) (string, error) {
		return gpu.TierOf(ctx, cel.Device{Driver: driver, Attributes: dev.Attributes, Capacity: dev.Capacity})
	},
	NodeTier:         func(node *v1.Node) string { return profileTiers[node.Labels[gpu.NodeProfileLabel]] },
	ProfileAttribute: gpu.AttrProfile,
	DeviceType: func(driver string, dev *resourceapi.Device) string {
		if a, ok := dev.Attributes[gpu.AttrType]; ok && driver == gpu.DriverName && a.StringValue != nil {
			return *a.StringValue
		}
		return ""
	},
	TimeSliceType: gpu.TypeTimeSlice,
}

// profileTiers are the built-in GPU profiles' tiers, by profile.
var profileTiers = func() map[string]string {
	m := map[string]string{}
	if profiles, err := fakegpu.Builtin(); err == nil {
		for name, p := range profiles {
			m[name] = p.Tier
		}
	}
	return m
}()
