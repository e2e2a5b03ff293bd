// Package pcilayout places the devices of a server that has no PCI bus of
// its own: the fake GPUs and NICs of dralab's drivers and the GPUs of NVML
// mock servers. Both drivers place their devices with it, so that a fake
// node's GPUs and NICs line up by construction, as on an 8-GPU training
// server (docs/gpu-nic.md):
//
//   - each PCI domain has four PCIe root complexes (switches), each root
//     two GPU slots and two NIC slots;
//   - GPU i and NIC i sit under the same root: a node of 8 GPUs and 8 NICs
//     pairs them one to one, two pairs per root;
//   - the first two roots of a domain are on one NUMA node, the last two on
//     the next: domain d's roots are on NUMA nodes 2d and 2d+1.
package pcilayout

import "fmt"

// rootBuses are the bus numbers of a domain's PCIe root complexes.
var rootBuses = []int{0x15, 0x37, 0x96, 0xb8}

// slotsPerRoot is how many devices of one kind share a root.
const slotsPerRoot = 2

// RootsPerDomain is how many PCIe roots each PCI domain has.
var RootsPerDomain = len(rootBuses)

// Slot is where a device sits on the PCI bus.
type Slot struct {
	// Domain is the PCI domain, RootBus the bus of the device's root
	// complex, Bus the device's own bus.
	Domain, RootBus, Bus int
	// NUMANode is the NUMA node of the device's root.
	NUMANode int
}

// place is slot i of a kind whose devices take the buses after the root's
// at offset (1 for GPUs, 3 for NICs).
func place(i, offset int) Slot {
	perDomain := slotsPerRoot * RootsPerDomain
	root := i % perDomain / slotsPerRoot
	domain := i / perDomain
	return Slot{
		Domain:   domain,
		RootBus:  rootBuses[root],
		Bus:      rootBuses[root] + offset + i%slotsPerRoot,
		NUMANode: 2*domain + root/(RootsPerDomain/2),
	}
}

// GPU is the slot of a node's i-th GPU.
func GPU(i int) Slot { return place(i, 1) }

// NIC is the slot of a node's i-th NIC: under the root of GPU i.
func NIC(i int) Slot { return place(i, 1+slotsPerRoot) }

// PCIeRoot is the slot's root complex as the standard attribute
// resource.kubernetes.io/pcieRoot spells it: pci<domain>:<bus>.
func (s Slot) PCIeRoot() string { return fmt.Sprintf("pci%04x:%02x", s.Domain, s.RootBus) }

// BusID is the device's PCI address as resource.kubernetes.io/pciBusID
// spells it: <domain>:<bus>:<device>.<function>.
func (s Slot) BusID() string { return fmt.Sprintf("%04x:%02x:00.0", s.Domain, s.Bus) }
