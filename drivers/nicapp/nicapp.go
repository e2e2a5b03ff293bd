// Package nicapp is the application of dralab's NIC driver, nic.dralab.dev:
// `dralab-driver nic`, which a cluster runs as a DaemonSet beside the GPU
// driver and the embedded lab beside each node that has NICs. Every flag
// has an environment-variable twin.
package nicapp

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakenic"
	"github.com/dralab/dralab/drivers/kit"
)

// Options are the driver's settings.
type Options struct {
	kit.NodeFlags
	Profile string
	NICs    int
	// Rack and NVLinkDomain place the node: every NIC carries them under
	// the names the GPUs carry them (TopologyAttributes).
	Rack, NVLinkDomain string
	// SkipNodeOperations publishes the NICs as needing no work on the
	// node: the kubelet never asks the driver to prepare their claims.
	SkipNodeOperations bool
	// NUMAList publishes numaNode as a list (fakenic.Inventory.NUMAList).
	NUMAList bool
	// ProfileLabel, NICsLabel, RackLabel and NVLinkDomainLabel name
	// labels of the node to read the profile, the NIC count and the
	// node's place from (a chart's one DaemonSet serving mixed nodes); a
	// flag given wins over the profile's label, a label present over the
	// count's flag.
	ProfileLabel, NICsLabel, RackLabel, NVLinkDomainLabel string
	// AttachInterfaces gives each container a real interface for each of
	// its NICs: a createRuntime hook (this program's `nic attach`) puts one
	// end of a veth pair, named and addressed as the claim's network data
	// says, into the pod's network namespace. For nodes that run
	// containers (the embedded lab's real node); a hollow node runs none.
	AttachInterfaces bool
}

// The topology attributes a NIC shares with the node's GPUs: one
// matchAttribute aligns devices of both drivers (drivers/gpu spells them
// the same; the lab's tests check).
const (
	AttrRack         = "topology.dralab.dev/rack"
	AttrNVLinkDomain = "topology.dralab.dev/nvlinkDomain"
)

// env gives every flag its environment-variable twin, as the GPU
// driver's.
var env = kit.Env{Prefix: "DRALAB_"}

// NewCommand returns the `nic` command.
func NewCommand() *cobra.Command {
	o := Options{}
	cmd := o.Command("nic",
		"dralab's NIC driver ("+fakenic.DriverName+"): a DRA kubelet plugin for a node's network adapters",
		`dralab's NIC driver publishes a node's network adapters, fake ones of a NIC profile, as DRA
ResourceSlices: each NIC under the PCIe root and on the NUMA node of the GPU of the same index
(resource.kubernetes.io/pcieRoot and numaNode, as the GPU driver publishes them), with its link
bandwidth as consumable capacity. A prepared claim's status carries each NIC's network data,
and the container gets the NIC's interface name in `+fakenic.EnvPrefix+`_<n>_INTERFACE.`,
		env,
		func(ctx context.Context, w io.Writer) error { return List(ctx, o, w) },
		func(ctx context.Context) error { return Run(ctx, o) })
	f := cmd.Flags()
	o.AddFlags(f, "/var/lib/dralab-nic-driver")
	f.StringVar(&o.Profile, "profile", "", "NIC profile: "+strings.Join(fakenic.ProfileNames(), ", "))
	f.IntVar(&o.NICs, "nics", 0, "number of NICs")
	f.BoolVar(&o.SkipNodeOperations, "skip-node-operations", false, "publish the NICs as needing no work on the node (skipNodeOperations: [\"*\"], which needs the DRAOptionalNodeOperations gate): the kubelet skips NodePrepareResources and NodeUnprepareResources for their claims, and containers get no CDI edits from them")
	f.BoolVar(&o.NUMAList, "numa-list", false, "publish resource.kubernetes.io/numaNode as a list (ints, which needs the cluster's DRAListTypeAttributes gate): the NIC's NUMA node and, for a Socket Direct adapter, the other socket's; off: the NIC's node, a number")
	f.StringVar(&o.Rack, "rack", "", "the node's rack: every NIC carries it as the attribute "+AttrRack+"; empty: unknown")
	f.StringVar(&o.NVLinkDomain, "nvlink-domain", "", "the node's NVLink domain: every NIC carries it as the attribute "+AttrNVLinkDomain+"; empty: unknown")
	f.BoolVar(&o.AttachInterfaces, "attach-interfaces", false, "give each container a real interface for each of its NICs (a veth pair's end in the pod's network namespace, named, addressed and with the hardware address the claim's network data says), through a createRuntime hook that runs this program's `nic attach`; needs root and a runtime that runs CDI hooks")
	f.StringVar(&o.ProfileLabel, "profile-label", "", "read the profile from this label of the node, unless --profile is given (one DaemonSet, mixed nodes)")
	f.StringVar(&o.NICsLabel, "nics-label", "", "read the number of NICs from this label of the node, when it has it")
	f.StringVar(&o.RackLabel, "rack-label", "", "read the rack from this label of the node, when it has it")
	f.StringVar(&o.NVLinkDomainLabel, "nvlink-domain-label", "", "read the NVLink domain from this label of the node, when it has it")
	env.Document(f)
	cmd.AddCommand(newAttachCommand())
	return cmd
}

// newAttachCommand is `nic attach`, the createRuntime hook of a container
// given a NIC: the runtime runs it with the container's OCI state on
// stdin.
func newAttachCommand() *cobra.Command {
	var a Attachment
	cmd := &cobra.Command{
		Use:   HookArg,
		Short: "put a NIC's interface into a container's network namespace (a createRuntime hook; the OCI state on stdin)",
		Args:  cobra.NoArgs,
		// The hook's argv comes from the driver's CDI spec, never from
		// the environment.
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return Attach(cmd.InOrStdin(), a)
		},
	}
	f := cmd.Flags()
	f.StringVar(&a.Interface, "interface", "", "the interface's name in the container")
	f.StringVar(&a.Address, "address", "", "its address, with the prefix length")
	f.StringVar(&a.HardwareAddress, "hardware-address", "", "its hardware (MAC) address")
	return cmd
}

// attaching gives each NIC of an inventory the hook that attaches its
// interface to a container: program `nic attach` with the NIC's network
// data.
type attaching struct {
	kit.Inventory
	program string
}

func (a attaching) Devices(ctx context.Context) ([]kit.Device, error) {
	devs, err := a.Inventory.Devices(ctx)
	for i, d := range devs {
		if nd := d.NetworkData; nd != nil && len(nd.IPs) > 0 {
			devs[i].Hooks = append(devs[i].Hooks, kit.Hook{HookName: "createRuntime", Path: a.program, Args: []string{
				a.program, "nic", HookArg, "--interface=" + nd.InterfaceName, "--address=" + nd.IPs[0], "--hardware-address=" + nd.HardwareAddress,
			}})
		}
	}
	return devs, err
}

// inventory is the NIC inventory the options describe.
func inventory(o Options) (*fakenic.Inventory, error) {
	if o.Profile == "" {
		return nil, fmt.Errorf("--profile (or $%s) is required: one of %s", env.Name("profile"), strings.Join(fakenic.ProfileNames(), ", "))
	}
	p, err := fakenic.LookupProfile(o.Profile)
	if err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	if o.NICs < 1 {
		return nil, fmt.Errorf("--nics %d: a node needs at least one NIC", o.NICs)
	}
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if o.Rack != "" {
		attrs[AttrRack] = resourceapi.DeviceAttribute{StringValue: ptr.To(o.Rack)}
	}
	if o.NVLinkDomain != "" {
		attrs[AttrNVLinkDomain] = resourceapi.DeviceAttribute{StringValue: ptr.To(o.NVLinkDomain)}
	}
	return &fakenic.Inventory{Node: o.NodeName, Profile: p, Count: o.NICs, Attributes: attrs, NUMAList: o.NUMAList}, nil
}

// Run runs the driver until ctx ends.
func Run(ctx context.Context, o Options) error {
	return o.RunDriver(ctx, env, fakenic.DriverName, func(ctx context.Context, client kubernetes.Interface, ko *kit.Options) error {
		if err := o.labels().FromNodeLabels(ctx, client, o.NodeName); err != nil {
			return err
		}
		inv, err := inventory(o)
		if err != nil {
			return err
		}
		ko.CDIKind, ko.EnvPrefix, ko.Inventory = fakenic.CDIKind, fakenic.EnvPrefix, inv
		if o.AttachInterfaces {
			program, err := os.Executable()
			if err != nil {
				return fmt.Errorf("--attach-interfaces: the hook is this program: %w", err)
			}
			ko.Inventory = attaching{Inventory: inv, program: program}
		}
		ko.SkipNodeOperations = o.SkipNodeOperations
		klog.FromContext(ctx).Info("Publishing NICs", "nics", o.NICs, "profile", o.Profile)
		return nil
	})
}

// labels are the settings the flags have read from node labels.
func (o *Options) labels() kit.LabelSettings {
	return kit.LabelSettings{What: "NIC", ProfileLabel: o.ProfileLabel, Profile: &o.Profile, CountLabel: o.NICsLabel, Count: &o.NICs,
		RackLabel: o.RackLabel, Rack: &o.Rack, NVLinkDomainLabel: o.NVLinkDomainLabel, NVLinkDomain: &o.NVLinkDomain}
}

// List writes the devices the driver would publish to w, as YAML.
func List(ctx context.Context, o Options, w io.Writer) error {
	return o.ListDevices(ctx, w, func() (kit.Inventory, error) { return inventory(o) })
}
