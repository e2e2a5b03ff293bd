// Package fakenic is the inventory of dralab's NIC driver, nic.dralab.dev:
// a node's network adapters, described by profiles of real NIC models and
// placed on the node's PCI bus beside its GPUs (drivers/pcilayout), so
// that NIC i and GPU i share a PCIe root and a NUMA node.
//
// A NIC publishes the standard topology attributes (pcieRoot, pciBusID,
// numaNode) that a claim's matchAttribute aligns with a GPU's, its model,
// link speed and RDMA support, and its link bandwidth as consumable
// capacity: claims share a NIC by bandwidth, and a claim that does not say
// takes the whole link. A prepared NIC's claim status carries its network
// data (interface, address, hardware address) and the container learns the
// interface's name from its environment.
package fakenic

import (
	"context"
	"crypto/sha256"
	"fmt"
	"maps"
	"slices"
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/pcilayout"
)

// The driver's names.
const (
	// DriverName is the NIC driver's DRA driver name.
	DriverName = "nic.dralab.dev"
	// CDIKind is the CDI kind of its devices.
	CDIKind = "nic.dralab.dev/nic"
	// EnvPrefix names a container's per-NIC variables: DRALAB_NIC_<n>
	// names the NIC, DRALAB_NIC_<n>_INTERFACE its interface.
	EnvPrefix = "DRALAB_NIC"
)

// Device attributes and capacity, unqualified (the driver's own domain):
// Kubernetes 1.38 refuses names qualified with the driver's own domain.
const (
	// AttrType is TypeNIC for every device of the driver.
	AttrType = "type"
	TypeNIC  = "nic"
	// AttrVendor, AttrModel and AttrProductName name the adapter.
	AttrVendor      = "vendor"
	AttrModel       = "model"
	AttrProductName = "productName"
	// AttrLinkSpeed is the link speed in Gb/s.
	AttrLinkSpeed = "linkSpeedGbps"
	// AttrRDMA is true for an adapter with RDMA (RoCE or InfiniBand).
	AttrRDMA = "rdma"
	// AttrInterface is the NIC's network interface on the node.
	AttrInterface = "interface"
	// AttrSocketDirect is true for an adapter attached to both CPU
	// sockets (two PCIe links, one per socket), as NVIDIA's Socket Direct
	// adapters are: it is close to the GPUs of both NUMA nodes.
	AttrSocketDirect = "socketDirect"
	// CapacityBandwidth is the link's bandwidth, in bits per second.
	CapacityBandwidth = "bandwidth"
)

// BandwidthStep is the grain of a NIC's bandwidth shares.
var BandwidthStep = resource.MustParse("1G")

// Profile is a NIC model.
type Profile struct {
	Name        string
	Vendor      string
	Model       string
	ProductName string
	// LinkSpeedGbps is the port's speed.
	LinkSpeedGbps int64
	RDMA          bool
	// SocketDirect: the adapter is attached to both sockets' NUMA nodes.
	SocketDirect bool
}

// profiles are the built-in NIC models, by name.
var profiles = map[string]Profile{
	"cx7-400g":    {Name: "cx7-400g", Vendor: "NVIDIA", Model: "ConnectX-7", ProductName: "NVIDIA ConnectX-7 400GbE/NDR single-port OSFP", LinkSpeedGbps: 400, RDMA: true},
	"cx6dx-100g":  {Name: "cx6dx-100g", Vendor: "NVIDIA", Model: "ConnectX-6 Dx", ProductName: "NVIDIA ConnectX-6 Dx 100GbE dual-port QSFP56", LinkSpeedGbps: 100, RDMA: true},
	"bf3-400g":    {Name: "bf3-400g", Vendor: "NVIDIA", Model: "BlueField-3", ProductName: "NVIDIA BlueField-3 B3140H 400GbE/NDR DPU", LinkSpeedGbps: 400, RDMA: true},
	"e810-100g":   {Name: "e810-100g", Vendor: "Intel", Model: "E810-C", ProductName: "Intel Ethernet Network Adapter E810-CQDA2", LinkSpeedGbps: 100, RDMA: true},
	"x710-10g":    {Name: "x710-10g", Vendor: "Intel", Model: "X710", ProductName: "Intel Ethernet Converged Network Adapter X710-DA2", LinkSpeedGbps: 10, RDMA: false},
	"cx7-sd-400g": {Name: "cx7-sd-400g", Vendor: "NVIDIA", Model: "ConnectX-7", ProductName: "NVIDIA ConnectX-7 400G Socket Direct (2x PCIe Gen5 x16)", LinkSpeedGbps: 400, RDMA: true, SocketDirect: true},
}

// ProfileNames are the built-in profiles' names, sorted.
func ProfileNames() []string { return slices.Sorted(maps.Keys(profiles)) }

// LookupProfile returns a built-in profile.
func LookupProfile(name string) (Profile, error) {
	p, ok := profiles[name]
	if !ok {
		return Profile{}, fmt.Errorf("no NIC profile %q: want one of %v", name, ProfileNames())
	}
	return p, nil
}

// Inventory is a node's fake NICs: Count adapters of one profile.
type Inventory struct {
	Node    string
	Profile Profile
	Count   int
	// Attributes are added to every NIC: where the node sits (rack,
	// NVLink domain), under the names its GPUs carry them.
	Attributes map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
	// NUMAList publishes numaNode as a list (ints, Kubernetes 1.37's
	// DRAListTypeAttributes, which the cluster must have on): the NIC's
	// NUMA node and, for a Socket Direct adapter, the other socket's.
	// Without it numaNode is the NIC's own node, a number.
	NUMAList bool
}

// Devices implements kit.Inventory: nic-0 … nic-<Count-1>, NIC i under the
// PCIe root of GPU i.
func (inv *Inventory) Devices(context.Context) ([]kit.Device, error) {
	if inv.Count < 1 {
		return nil, fmt.Errorf("count %d: a NIC inventory needs at least one NIC", inv.Count)
	}
	p := inv.Profile
	link := *resource.NewScaledQuantity(p.LinkSpeedGbps, resource.Giga)
	devices := make([]kit.Device, 0, inv.Count)
	for i := range inv.Count {
		name := fmt.Sprintf("nic-%d", i)
		slot := pcilayout.NIC(i)
		ifName := InterfaceName(slot)
		mac := HardwareAddress(inv.Node, i)
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:        {StringValue: ptr.To(TypeNIC)},
			AttrVendor:      {StringValue: ptr.To(p.Vendor)},
			AttrModel:       {StringValue: ptr.To(p.Model)},
			AttrProductName: {StringValue: ptr.To(p.ProductName)},
			AttrLinkSpeed:   {IntValue: ptr.To(p.LinkSpeedGbps)},
			AttrRDMA:        {BoolValue: ptr.To(p.RDMA)},
			AttrInterface:   {StringValue: ptr.To(ifName)},
			deviceattribute.StandardDeviceAttributePCIeRoot: {StringValue: ptr.To(slot.PCIeRoot())},
			deviceattribute.StandardDeviceAttributePCIBusID: {StringValue: ptr.To(slot.BusID())},
			deviceattribute.StandardDeviceAttributeNUMANode: inv.numaNode(slot),
			AttrSocketDirect: {BoolValue: ptr.To(p.SocketDirect)},
		}
		maps.Copy(attrs, inv.Attributes)
		devices = append(devices, kit.Device{
			API: resourceapi.Device{
				Name:                     name,
				Attributes:               attrs,
				AllowMultipleAllocations: ptr.To(true),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					CapacityBandwidth: {
						Value: link,
						// A claim that does not say takes the whole link.
						RequestPolicy: &resourceapi.CapacityRequestPolicy{
							Default:    ptr.To(link),
							ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(BandwidthStep), Max: ptr.To(link), Step: ptr.To(BandwidthStep)},
						},
					},
				},
			},
			Env:        map[string]string{"": name, "INTERFACE": ifName, "PCI_BUS_ID": slot.BusID()},
			StatusData: map[string]string{"model": p.Model, "pciBusID": slot.BusID()},
			NetworkData: &resourceapi.NetworkDeviceData{
				InterfaceName:   ifName,
				IPs:             []string{Address(inv.Node, i)},
				HardwareAddress: mac,
			},
		})
	}
	return devices, nil
}

// numaNode is a NIC's numaNode attribute: its slot's NUMA node or, as a
// list, the NUMA nodes it is attached to (a Socket Direct adapter also
// the other socket's: the layout puts a domain's two NUMA nodes side by
// side, 2d and 2d+1).
func (inv *Inventory) numaNode(slot pcilayout.Slot) resourceapi.DeviceAttribute {
	if !inv.NUMAList {
		return resourceapi.DeviceAttribute{IntValue: ptr.To(int64(slot.NUMANode))}
	}
	nodes := []int64{int64(slot.NUMANode)}
	if inv.Profile.SocketDirect {
		nodes = append(nodes, int64(slot.NUMANode^1))
	}
	return resourceapi.DeviceAttribute{IntValues: nodes}
}

// InterfaceName is the predictable name the kernel gives the port of a NIC
// in a slot (enp<bus>s0f0np0, the bus in decimal).
func InterfaceName(s pcilayout.Slot) string {
	name := "enp" + strconv.Itoa(s.Bus) + "s0f0np0"
	if s.Domain > 0 {
		name = "enP" + strconv.Itoa(s.Domain) + "p" + strconv.Itoa(s.Bus) + "s0f0np0"
	}
	return name
}

// HardwareAddress is NIC i's MAC address on a node: locally administered,
// derived from the node and index, so stable across restarts and distinct
// across nodes.
func HardwareAddress(node string, i int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("dralab-nic/%s/%d", node, i)))
	return fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", sum[0], sum[1], sum[2], sum[3], sum[4])
}

// Address is NIC i's address on a node: NIC i of every node is on the
// subnet 10.(100+i).0.0/16, as rail-optimised training fabrics put the
// i-th NIC of every server on rail i; the host part comes from the node's
// name.
func Address(node string, i int) string {
	sum := sha256.Sum256([]byte("dralab-nic/" + node))
	host := int(sum[0])<<8 | int(sum[1])
	// Neither the network's nor the broadcast address.
	host = 1 + host%(1<<16-2)
	return fmt.Sprintf("10.%d.%d.%d/16", 100+i%156, host>>8, host&0xff)
}

// The driver's DeviceClasses.
const (
	// ClassAny is the class of any NIC of the driver.
	ClassAny = DriverName
	// ClassRDMA is the class of NICs with RDMA, what GPUDirect RDMA needs.
	ClassRDMA = "rdma." + DriverName
)

// DeviceClasses are the classes the driver's deployment creates.
func DeviceClasses() []resourceapi.DeviceClass {
	driver := fmt.Sprintf("device.driver == %q", DriverName)
	rdma := fmt.Sprintf("%s && device.attributes[%q].%s", driver, DriverName, AttrRDMA)
	class := func(name, expression string) resourceapi.DeviceClass {
		return resourceapi.DeviceClass{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/part-of": "dralab"}},
			Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
				Expression: expression,
			}}}},
		}
	}
	return []resourceapi.DeviceClass{class(ClassAny, driver), class(ClassRDMA, rdma)}
}
