// Package gpuapp is the application of dralab's GPU driver, cmd/dralab-driver:
// the binary a cluster runs as a DaemonSet and the embedded lab runs beside
// each GPU node. Every flag has an environment-variable twin.
package gpuapp

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/nvml"
	"github.com/dralab/dralab/drivers/nvml/nvmllib"
)

// Modes.
const (
	ModeDRA          = "dra"
	ModeDevicePlugin = "device-plugin"
)

// Options are the driver's settings.
type Options struct {
	kit.NodeFlags
	Mode      string
	Inventory string
	NVML      string
	// DriverRoot, NVMLLibrary, DevRoot and SysfsRoot are where an NVML
	// inventory finds the NVIDIA driver (roots.go).
	DriverRoot   string
	NVMLLibrary  string
	DevRoot      string
	SysfsRoot    string
	Profile      string
	ProfileFile  string
	ProfileLabel string
	GPUs         int
	GPUsLabel    string
	// Partitioning, Sharing and Attach are the fake inventory's modes:
	// fakegpu.PartitioningMIG, fakegpu.SharingMemory,
	// fakegpu.AttachFabric, or empty.
	Partitioning string
	Sharing      string
	Attach       string
	// TimeSlices is the number of time-sliced shares of each fake GPU
	// (fakegpu.Inventory.TimeSlices).
	TimeSlices int
	// DeviceMetadata gives each container of a claim a file of its GPUs'
	// attributes (kit.Options.DeviceMetadata).
	DeviceMetadata bool
	// PartitionTypes names each partitioned fake GPU's devices' partition
	// type as its slices' partitionTypeAttribute.
	PartitionTypes bool
	// HostMemoryOverhead publishes each fake GPU's host-memory overhead
	// (its profile's hostMemoryOverhead) as node-allocatable memory per pod.
	HostMemoryOverhead bool
	// Rack and NVLinkDomain place the node (gpu.Topology): every GPU
	// carries them as attributes. RackLabel and NVLinkDomainLabel read
	// them from the node's labels instead, where it has them.
	Rack              string
	NVLinkDomain      string
	RackLabel         string
	NVLinkDomainLabel string
	DevicePluginsDir  string
	// FaultsFile is the node's GPU faults file (gpu.Faults), which the
	// driver watches: a GPU named there is unhealthy and tainted.
	FaultsFile string
	// IgnoredXIDs are Xids the node takes for application errors, beyond
	// those gpu.XIDs says are (13, 31, 43, 45, 68, 109): a GPU that
	// reports one stays healthy.
	IgnoredXIDs []int
}

// faultsPoll is how often the driver reads its GPU faults file.
const faultsPoll = 250 * time.Millisecond

// EnvPrefix prefixes every flag's environment-variable twin.
const EnvPrefix = "DRALAB_"

// NewCommand returns the driver command.
func NewCommand() *cobra.Command {
	o := Options{}
	cmd := o.Command("dralab-driver",
		"dralab's GPU driver ("+gpu.DriverName+"): a DRA kubelet plugin, or a device plugin in counting mode",
		`dralab's GPU driver publishes a node's GPUs as DRA ResourceSlices and prepares claims
with CDI specs (--mode=dra), or serves them through the kubelet's device-plugin API as the
extended resource `+gpu.ExtendedResource+` (--mode=device-plugin), the way GPU device plugins count.
Never run both modes on one node: the two allocators would hand out the same GPUs.`,
		env,
		func(ctx context.Context, w io.Writer) error { return List(ctx, o, w) },
		func(ctx context.Context) error { return Run(ctx, o) })
	f := cmd.Flags()
	o.AddFlags(f, "/var/lib/dralab-driver")
	f.StringVar(&o.Mode, "mode", ModeDRA, "dra or device-plugin")
	f.StringVar(&o.Inventory, "inventory", InventoryFake, "where devices come from: fake (GPU profiles) or nvml (NVIDIA's management library)")
	f.StringVar(&o.NVML, "nvml", nvml.SourceLibrary, "the NVML of an nvml inventory: "+strings.Join(nvmllib.Sources(), ", ")+" (go-nvml's mock servers, for labs without GPUs)")
	f.StringVar(&o.DriverRoot, "driver-root", "/", "where the NVIDIA driver is installed (/run/nvidia/driver when a driver container installs it): the NVML library and the device files are found under it")
	f.StringVar(&o.NVMLLibrary, "nvml-library", "", "the NVML library's path; empty: "+nvmlLibrary+" under --driver-root (the loader's search where the root is /)")
	f.StringVar(&o.DevRoot, "dev-root", "", "the host directory of the NVIDIA device files, named in the CDI specs; empty: --driver-root's dev where it holds nvidiactl, else /dev")
	f.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "where sysfs is, for the GPUs' PCIe roots and NUMA nodes (an NVML mock's rendered tree)")
	f.StringVar(&o.Profile, "profile", "", "built-in GPU profile of a fake inventory: "+strings.Join(fakegpu.BuiltinNames(), ", "))
	f.StringVar(&o.ProfileFile, "profile-file", "", "GPU profile file of a fake inventory, instead of --profile")
	f.StringVar(&o.ProfileLabel, "profile-label", "", "read the profile from this label of the node, instead of --profile (one DaemonSet, mixed nodes)")
	f.IntVar(&o.GPUs, "gpus", 0, "number of fake GPUs")
	f.StringVar(&o.GPUsLabel, "gpus-label", "", "read the number of fake GPUs from this label of the node, when it has it")
	f.StringVar(&o.Partitioning, "partitioning", "", "partition the fake GPUs: "+fakegpu.PartitioningMIG+" publishes each GPU's MIG placements beside it, all drawing from the GPU's counters (profiles with MIG: "+strings.Join(fakegpu.MIGProfileNames(), ", ")+"); empty: whole GPUs only")
	f.StringVar(&o.Attach, "attach", "", "attach the fake GPUs on demand: "+fakegpu.AttachFabric+" gives each GPU the binding condition "+fakegpu.ConditionAttached+" (failure: "+fakegpu.ConditionAttachFailed+"), so the scheduler binds a pod only once an attach controller has set it in the claim's status; empty: GPUs are in the node")
	f.StringVar(&o.Sharing, "sharing", "", "share the fake GPUs: "+fakegpu.SharingMemory+" lets several claims share a GPU, each asking for some of its memory; empty: one claim per GPU")
	f.IntVar(&o.TimeSlices, "time-slices", 0, "offer each fake GPU as this many time-sliced shares too ("+gpu.ClassTimeSlice+"), each taking one of the GPU's time slices; with --partitioning "+fakegpu.PartitioningMIG+" a GPU runs MIG devices or shares, whichever is allocated first (compatibility groups: needs the DRADeviceCompatibilityGroups feature gate); 0: none")
	f.BoolVar(&o.DeviceMetadata, "device-metadata", false, "give each container of a claim a file of its GPUs' attributes, mounted through CDI at /var/run/kubernetes.io/dra-device-attributes/…/"+gpu.DriverName+"-metadata.json (device metadata, beta in Kubernetes 1.37)")
	f.BoolVar(&o.PartitionTypes, "partition-types", false, "give every device of a partitioned or time-sliced fake GPU its partition type ("+gpu.AttrPartitionType+": gpu-0/"+gpu.PartitionWhole+", gpu-0/1g.10gb@3 for a MIG placement, gpu-0/"+gpu.TypeTimeSlice+") and name it as the slices' partitionTypeAttribute, which a pool status request counts by (needs --partitioning or --time-slices, and the DRAPartitionableDevicesType feature gate)")
	f.BoolVar(&o.HostMemoryOverhead, "host-memory-overhead", false, "publish each fake GPU's host-memory overhead (the profile's hostMemoryOverhead) as nodeAllocatableResources memory per pod, which the scheduler adds to the pod's memory on the node (needs the DRANodeAllocatableResources feature gate)")
	f.StringVar(&o.Rack, "rack", "", "the node's rack: every GPU carries it as the attribute "+gpu.AttrRack+"; empty: unknown")
	f.StringVar(&o.NVLinkDomain, "nvlink-domain", "", "the node's NVLink domain: every GPU carries it as the attribute "+gpu.AttrNVLinkDomain+"; empty: unknown")
	f.StringVar(&o.RackLabel, "rack-label", "", "read the rack from this label of the node (e.g. "+gpu.NodeRackLabel+"), when it has it")
	f.StringVar(&o.NVLinkDomainLabel, "nvlink-domain-label", "", "read the NVLink domain from this label of the node (e.g. "+gpu.NodeNVLinkDomainLabel+"), when it has it")
	f.StringVar(&o.DevicePluginsDir, "kubelet-device-plugins-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device-plugin directory (device-plugin mode)")
	f.StringVar(&o.FaultsFile, "faults-file", "", "a node-local file of injected GPU faults (what go run mage.go gpu:fail writes), watched: a GPU named there reports its XID as unhealthy to the kubelet and is tainted in the ResourceSlice; empty: none")
	f.IntSliceVar(&o.IgnoredXIDs, "ignored-xids", nil, "Xids this node takes for application errors, beyond 13, 31, 43, 45, 68 and 109: a GPU that reports one stays healthy (e.g. 92,94)")
	env.Document(f)
	return cmd
}

// env gives every flag its environment-variable twin.
var env = kit.Env{Prefix: EnvPrefix}

func envName(flag string) string { return env.Name(flag) }

// Inventories.
const (
	InventoryFake = "fake"
	InventoryNVML = "nvml"
)

// Run runs the driver until ctx ends.
func Run(ctx context.Context, o Options) error {
	for _, x := range o.IgnoredXIDs {
		if x <= 0 {
			return fmt.Errorf("--ignored-xids: %d is not an Xid (they are positive)", x)
		}
	}
	switch o.Mode {
	case ModeDRA, ModeDevicePlugin:
	default:
		return fmt.Errorf("--mode %q: want %s or %s", o.Mode, ModeDRA, ModeDevicePlugin)
	}
	if o.Mode == ModeDevicePlugin && o.DeviceMetadata {
		return fmt.Errorf("--device-metadata: the kubelet gives device metadata to claims; --mode %s serves an extended resource", ModeDevicePlugin)
	}
	if o.PartitionTypes && o.Inventory != InventoryFake {
		return fmt.Errorf("--partition-types: only a fake inventory's partitioned GPUs carry partition types")
	}
	var inv kit.Inventory
	r := kit.Run{
		Name: gpu.DriverName,
		// A device plugin talks to the kubelet only: it reads the API
		// just for node labels the flags name. Without them it starts
		// before the API serves and before it has credentials, as a lab
		// starts it, with its node.
		WithoutClient: o.Mode == ModeDevicePlugin && !o.labels().Reads(),
		Setup: func(ctx context.Context, client kubernetes.Interface, ko *kit.Options) error {
			if client != nil {
				if err := o.labels().FromNodeLabels(ctx, client, o.NodeName); err != nil {
					return err
				}
			}
			if nv, ok := inv.(*nvml.Inventory); ok {
				nv.Topology = o.topology()
			}
			if inv == nil {
				var err error
				if inv, _, err = openInventory(o); err != nil {
					return err
				}
			}
			ko.CDIKind, ko.EnvPrefix, ko.Inventory, ko.Configure = gpu.CDIKind, gpu.EnvPrefix, inv, gpu.Configure
			ko.DeviceMetadata = o.DeviceMetadata
			if o.PartitionTypes {
				ko.PartitionTypeAttribute = gpu.DriverName + "/" + gpu.AttrPartitionType
			}
			klog.FromContext(ctx).Info("Serving GPUs", "mode", o.Mode, "inventory", o.Inventory)
			return nil
		},
		Started: func(ctx context.Context, d *kit.Driver) error { return watchHealth(ctx, o, inv, d) },
	}
	if o.Inventory != InventoryFake {
		// NVML first: on a machine without it, that is the one thing to say.
		r.Open = func(context.Context) (func(), error) {
			var closeInv func()
			var err error
			inv, closeInv, err = openInventory(o)
			return closeInv, err
		}
	}
	if o.Mode == ModeDevicePlugin {
		r.Serve = func(ctx context.Context, ko kit.Options) (kit.Readier, func(), error) {
			p, err := kit.StartDevicePlugin(ctx, kit.DevicePluginOptions{
				ResourceName: gpu.ExtendedResource,
				Dir:          o.DevicePluginsDir,
				Socket:       gpu.DevicePluginSocket,
				EnvPrefix:    gpu.EnvPrefix,
				Inventory:    ko.Inventory,
			})
			if err != nil {
				return nil, nil, err
			}
			// Counting mode reports failed GPUs Unhealthy from the same
			// watch: the kubelet counts them out.
			if err := watchHealth(ctx, o, ko.Inventory, p); err != nil {
				p.Stop()
				return nil, nil, err
			}
			return p, p.Stop, nil
		}
	}
	return o.NodeFlags.Run(ctx, env, r)
}

// labels are the settings the flags have read from node labels: the
// profile only for a fake inventory given none.
func (o *Options) labels() kit.LabelSettings {
	s := kit.LabelSettings{What: "GPU", CountLabel: o.GPUsLabel, Count: &o.GPUs,
		RackLabel: o.RackLabel, Rack: &o.Rack, NVLinkDomainLabel: o.NVLinkDomainLabel, NVLinkDomain: &o.NVLinkDomain}
	if o.Inventory == InventoryFake && o.ProfileFile == "" {
		s.ProfileLabel, s.Profile = o.ProfileLabel, &o.Profile
	}
	return s
}

// List writes the inventory's devices, as published in ResourceSlices, to
// w. A fake inventory needs --profile and --gpus (no node labels are read).
func List(ctx context.Context, o Options, w io.Writer) error {
	inv, closeInv, err := openInventory(o)
	if err != nil {
		return err
	}
	defer closeInv()
	return kit.WriteDevices(ctx, inv, w)
}

// openInventory opens the inventory the options name; close releases it.
func openInventory(o Options) (inv kit.Inventory, close func(), err error) {
	switch o.Inventory {
	case InventoryNVML:
		nv, err := nvmlInventory(o)
		if err != nil {
			return nil, nil, err
		}
		return nv, func() { _ = nv.Close() }, nil
	case InventoryFake:
		fake, err := fakeInventory(o)
		return fake, func() {}, err
	}
	return nil, nil, fmt.Errorf("--inventory %q: want %s or %s", o.Inventory, InventoryFake, InventoryNVML)
}

// nvmlInventory opens NVML, or a mock server, whose GPUs get stable
// identities from the node's name.
func nvmlInventory(o Options) (*nvml.Inventory, error) {
	mock := strings.HasPrefix(o.NVML, nvml.MockPrefix)
	if mock && o.NodeName == "" {
		return nil, fmt.Errorf("--nvml %s: a mock server needs --node-name (or $%s)", o.NVML, envName("node-name"))
	}
	opts := []nvmllib.Option{nvmllib.WithNode(o.NodeName)}
	if !mock {
		library, err := o.nvmlLibraryPath()
		if err != nil {
			return nil, err
		}
		opts = append(opts, nvmllib.WithLibraryPath(library))
	}
	lister, err := nvmllib.Open(o.NVML, opts...)
	if err != nil {
		return nil, err
	}
	// A mock's GPUs have no device files for the runtime to find.
	return &nvml.Inventory{Lister: lister, SysfsRoot: cmp.Or(o.SysfsRoot, "/sys"), DevRoot: o.devRoot(), OmitDeviceNodes: mock, Topology: o.topology()}, nil
}

// topology is where the options place the node.
func (o Options) topology() gpu.Topology {
	return gpu.Topology{Rack: o.Rack, NVLinkDomain: o.NVLinkDomain}
}

func fakeInventory(o Options) (kit.Inventory, error) {
	var (
		p   *fakegpu.Profile
		err error
	)
	switch {
	case o.Profile != "" && o.ProfileFile != "":
		return nil, fmt.Errorf("give --profile or --profile-file, not both")
	case o.ProfileFile != "":
		p, err = fakegpu.LoadProfile(o.ProfileFile)
	case o.Profile != "":
		p, err = fakegpu.LookupProfile(o.Profile)
	default:
		return nil, fmt.Errorf("a fake inventory needs --profile or --profile-file")
	}
	if err != nil {
		return nil, err
	}
	if o.GPUs < 1 {
		return nil, fmt.Errorf("--gpus %d: a fake inventory needs at least one GPU", o.GPUs)
	}
	if (o.Partitioning != "" || o.Sharing != "" || o.Attach != "" || o.TimeSlices != 0 || o.HostMemoryOverhead) && o.Mode == ModeDevicePlugin {
		return nil, fmt.Errorf("--mode %s counts whole GPUs: --partitioning, --sharing, --attach, --time-slices and --host-memory-overhead need --mode %s", ModeDevicePlugin, ModeDRA)
	}
	inv := &fakegpu.Inventory{Node: o.NodeName, Profile: p, Count: o.GPUs, Partitioning: o.Partitioning, Sharing: o.Sharing, Attach: o.Attach, TimeSlices: o.TimeSlices, Topology: o.topology(), HostMemoryOverhead: o.HostMemoryOverhead, PartitionTypes: o.PartitionTypes}
	if err := inv.Validate(); err != nil {
		// The inventory says "partitioning …": the flag's name.
		return nil, fmt.Errorf("--%w", err)
	}
	return inv, nil
}
