package fakegpu

import (
	"context"
	"crypto/sha256"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/kit"
)

// Inventory is a node's fake GPUs: Count devices of one profile.
type Inventory struct {
	Node    string
	Profile *Profile
	Count   int
}

var _ kit.NodeWideInventory = &Inventory{}

// NodeEnv names the node in a container of any of its fake GPUs: the fake
// inventory's node-wide edit, as real GPUs' control device files are.
const NodeEnv = "DRALAB_GPU_NODE"

// NodeEdits implements kit.NodeWideInventory.
func (inv *Inventory) NodeEdits() kit.ContainerEdits {
	return kit.ContainerEdits{Env: map[string]string{NodeEnv: inv.Node}}
}

// rootBuses are the PCIe root complexes' bus numbers; two GPUs share each
// root, as on an 8-GPU server with PCIe switches.
var rootBuses = []int{0x15, 0x37, 0x96, 0xb8}

// PCITopology places a server's i-th GPU: its PCI domain, the bus of its
// root complex, and its own bus. The NVML mock servers use the same layout,
// so that fake and mock nodes of one size publish the same topology.
func PCITopology(i int) (domain, rootBus, bus int) {
	perDomain := 2 * len(rootBuses)
	rootBus = rootBuses[i%perDomain/2]
	return i / perDomain, rootBus, rootBus + 1 + i%2
}

// Devices implements kit.Inventory: gpu-0 … gpu-<Count-1>, with UUIDs
// derived from the node name and index (stable across restarts, distinct
// across nodes) and PCI addresses laid out like a real server.
func (inv *Inventory) Devices(context.Context) ([]kit.Device, error) {
	p := inv.Profile
	cc, err := NormalizeVersion(p.CUDAComputeCapability)
	if err != nil {
		return nil, err
	}
	driverVersion, err := NormalizeVersion(p.DriverVersion)
	if err != nil {
		return nil, err
	}
	cudaVersion, err := NormalizeVersion(p.CUDADriverVersion)
	if err != nil {
		return nil, err
	}
	devices := make([]kit.Device, 0, inv.Count)
	for i := range inv.Count {
		name := fmt.Sprintf("gpu-%d", i)
		uuid := DeviceUUID(inv.Node, i)
		domain, root, bus := PCITopology(i)
		busID := fmt.Sprintf("%04x:%02x:00.0", domain, bus)
		pcieRoot := fmt.Sprintf("pci%04x:%02x", domain, root)
		devices = append(devices, kit.Device{
			API: resourceapi.Device{
				Name: name,
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"type":                            {StringValue: ptr.To("gpu")},
					"index":                           {IntValue: ptr.To(int64(i))},
					"minor":                           {IntValue: ptr.To(int64(i))},
					"uuid":                            {StringValue: ptr.To(uuid)},
					"productName":                     {StringValue: ptr.To(p.ProductName)},
					"brand":                           {StringValue: ptr.To(p.Brand)},
					"architecture":                    {StringValue: ptr.To(p.Architecture)},
					"cudaComputeCapability":           {VersionValue: ptr.To(cc)},
					"driverVersion":                   {VersionValue: ptr.To(driverVersion)},
					"cudaDriverVersion":               {VersionValue: ptr.To(cudaVersion)},
					"resource.kubernetes.io/pciBusID": {StringValue: ptr.To(busID)},
					"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(pcieRoot)},
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": {Value: p.Memory},
				},
			},
			Env: map[string]string{"": name, "PRODUCT": p.ProductName, "UUID": uuid},
		})
	}
	return devices, nil
}

// DeviceUUID is a fake GPU's UUID, in NVML's "GPU-" form.
func DeviceUUID(node string, index int) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("dralab/%s/%d", node, index)))
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}
