// Package nvml is the inventory of dralab's GPU driver on machines with
// NVIDIA GPUs: GPUs as an enumeration backend (a Lister) reports them,
// published under the same attribute names and types as the fake driver,
// so that one claim works against both. The package is pure Go: the cgo
// that NVML needs lives in nvmllib alone, so attributes and names can be
// built and tested anywhere.
package nvml

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
)

// GPU is what enumeration learns about one GPU. A zero field is something
// the backend could not report: its attribute or capacity is left out of
// the device rather than published wrong.
type GPU struct {
	// Minor is the number of the device file /dev/nvidia<minor>; it names
	// the device because, unlike Index, it does not change when another
	// GPU of the machine disappears.
	Minor int
	// Index is NVML's enumeration index.
	Index        int
	UUID         string
	ProductName  string
	Brand        string
	Architecture string
	MemoryBytes  uint64
	// ComputeCapability is the CUDA compute capability, major and minor.
	ComputeCapability [2]int
	// DriverVersion is the version as NVML writes it, e.g. "535.104.05".
	DriverVersion string
	// CUDADriverVersion is NVML's integer form, 1000×major + 10×minor.
	CUDADriverVersion int
	// PCIBusID is the bus ID as NVML writes it, e.g. "00000000:3B:00.0".
	PCIBusID string
	// MIG is the GPU's MIG geometry as NVML reports its GPU instance
	// profiles, nil unless MIG mode is enabled: then the GPU is published
	// partitioned, like the fake driver's partitioning: mig.
	MIG *gpu.MIG
	// MIGMode says that MIG mode is enabled, whether or not NVML lists a
	// GPU instance profile: a GPU in MIG mode without one runs no CUDA
	// work whole, and is left out.
	MIGMode bool
	// Multiprocessors are what the GPU's instances share out: those of its
	// largest GPU instance profile (0 without MIG).
	Multiprocessors int
	// PCIeRoot is the GPU's PCIe root complex, e.g. "pci0000:3a", when the
	// backend knows it without sysfs: only mock backends do, whose bus IDs
	// are invented and must not be looked up in the host's sysfs, where
	// they may name some other device.
	PCIeRoot string
	// NUMANode is the GPU's NUMA node when the backend knows it without
	// sysfs (mock backends); nil: read from sysfs.
	NUMANode *int
}

// Lister enumerates a machine's GPUs.
type Lister interface {
	GPUs(ctx context.Context) ([]GPU, error)
	// Close releases the backend; a closed Lister lists nothing.
	Close() error
}

// Inventory is a node's GPUs as a Lister reports them.
type Inventory struct {
	Lister
	// SysfsRoot is where sysfs is mounted, "/sys" if empty; the PCIe root
	// complexes are read from it.
	SysfsRoot string
	// OmitDeviceNodes leaves the device files out of the devices and of the
	// node's edits: a mock backend's GPUs have none, and the container
	// runtime fails to create a container whose CDI device files it cannot
	// stat.
	OmitDeviceNodes bool
	// DevRoot is the host directory holding NVIDIA's device files, "/dev"
	// if empty: a driver installed by a driver container keeps them
	// elsewhere. Containers see them in /dev whatever it is.
	DevRoot string
	// Topology is where the node sits: every GPU and MIG device carries
	// its rack and NVLink domain as attributes.
	Topology gpu.Topology

	// mu guards what the first listing learnt: the devices, the counter
	// sets and the MIG devices' placements.
	mu         sync.Mutex
	listed     *listing
	placements map[string]MIGPlacement
}

// listing is the node's devices and counter sets, listed once: the devices
// the driver publishes are those it prepares.
type listing struct {
	devices []kit.Device
	sets    []resourceapi.CounterSet
}

var _ kit.NodeWideInventory = &Inventory{}

// Device attribute names: those of NVIDIA's DRA driver, which the fake
// driver publishes too.
const (
	attrType              = "type"
	attrIndex             = "index"
	attrMinor             = "minor"
	attrUUID              = "uuid"
	attrProductName       = "productName"
	attrBrand             = "brand"
	attrArchitecture      = "architecture"
	attrComputeCapability = "cudaComputeCapability"
	attrDriverVersion     = "driverVersion"
	attrCUDADriverVersion = "cudaDriverVersion"
	capacityMemory        = "memory"
)

// VisibleDevicesEnv is the variable through which the NVIDIA container
// toolkit learns a container's GPUs, by UUID.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// controlNodes are the device files every CUDA process opens besides its
// GPUs' own: the node's, not any one GPU's, so they are node-wide edits.
var controlNodes = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}

// NodeEdits implements kit.NodeWideInventory: the control device files.
func (inv *Inventory) NodeEdits() kit.ContainerEdits {
	var edits kit.ContainerEdits
	if inv.OmitDeviceNodes {
		return edits
	}
	for _, name := range controlNodes {
		edits.DeviceNodes = append(edits.DeviceNodes, inv.deviceNode(name))
	}
	return edits
}

// deviceNode is the device file /dev/<name>, found in DevRoot on the host.
func (inv *Inventory) deviceNode(name string) kit.DeviceNode {
	n := kit.DeviceNode{Path: "/dev/" + name}
	if inv.DevRoot != "" {
		n.HostPath = filepath.Join(inv.DevRoot, name)
	}
	return n
}

// DeviceName is the name of the GPU with the given minor number.
func DeviceName(minor int) string { return fmt.Sprintf("gpu-%d", minor) }

// Devices implements kit.Inventory: one device per GPU, named after its
// minor number and sorted by it; a GPU in MIG mode comes after its MIG
// devices, as the fake driver's partitioned GPUs do.
func (inv *Inventory) Devices(ctx context.Context) ([]kit.Device, error) {
	l, err := inv.list(ctx)
	if err != nil {
		return nil, err
	}
	return l.devices, nil
}

func (inv *Inventory) list(ctx context.Context) (*listing, error) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.listed != nil {
		return inv.listed, nil
	}
	if inv.Lister == nil {
		return nil, errors.New("NVML inventory: no GPU lister")
	}
	gpus, err := inv.GPUs(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing GPUs: %w", err)
	}
	gpus = slices.Clone(gpus)
	slices.SortFunc(gpus, func(a, b GPU) int { return cmp.Compare(a.Minor, b.Minor) })
	logger := klog.FromContext(ctx)
	l := &listing{devices: make([]kit.Device, 0, len(gpus))}
	inv.placements = map[string]MIGPlacement{}
	for i, g := range gpus {
		if g.Minor < 0 {
			return nil, fmt.Errorf("GPU at index %d has no minor number (%d), which names its device", g.Index, g.Minor)
		}
		if i > 0 && gpus[i-1].Minor == g.Minor {
			return nil, fmt.Errorf("GPUs at index %d and %d have the same minor number %d", gpus[i-1].Index, g.Index, g.Minor)
		}
		if g.MIGMode && g.MIG == nil {
			logger.Error(nil, "Leaving out a GPU in MIG mode whose NVML lists no GPU instance profile: in MIG mode a GPU runs CUDA work only in its instances; disable MIG mode (nvidia-smi -i <index> -mig 0) to publish it whole",
				"index", g.Index, "uuid", g.UUID)
			continue
		}
		whole := inv.device(logger, g)
		if g.MIG != nil && g.UUID != "" && g.MemoryBytes > 0 && g.MemoryBytes <= math.MaxInt64 {
			migs, set := inv.migDevices(g, &whole)
			l.devices = append(l.devices, migs...)
			l.sets = append(l.sets, set)
		} else if g.MIG != nil {
			logger.Info("Publishing a GPU in MIG mode whole: NVML reported no UUID or memory, which its MIG devices need", "device", whole.API.Name)
		}
		l.devices = append(l.devices, whole)
	}
	logger.V(1).Info("Enumerated GPUs", "count", len(gpus), "devices", len(l.devices), "counterSets", len(l.sets))
	inv.listed = l
	return l, nil
}

func (inv *Inventory) device(logger klog.Logger, g GPU) kit.Device {
	name := DeviceName(g.Minor)
	logger = logger.WithValues("device", name, "index", g.Index)
	attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, 12)
	attrs[attrType] = resourceapi.DeviceAttribute{StringValue: ptr.To("gpu")}
	attrs[attrIndex] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.Index))}
	attrs[attrMinor] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(g.Minor))}
	setString := func(name resourceapi.QualifiedName, v string) {
		if v != "" {
			attrs[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(v)}
		}
	}
	setString(attrUUID, g.UUID)
	setString(attrProductName, g.ProductName)
	setString(attrBrand, g.Brand)
	setString(attrArchitecture, g.Architecture)
	setVersion := func(name resourceapi.QualifiedName, v string) {
		if v == "" {
			return
		}
		semver, err := gpu.NormalizeVersion(v)
		if err != nil {
			// One odd value must not keep the node's GPUs unpublished.
			logger.Error(err, "Leaving out an attribute NVML reported in a form that is not a version", "attribute", name)
			return
		}
		attrs[name] = resourceapi.DeviceAttribute{VersionValue: ptr.To(semver)}
	}
	if g.ComputeCapability != [2]int{} {
		setVersion(attrComputeCapability, fmt.Sprintf("%d.%d", g.ComputeCapability[0], g.ComputeCapability[1]))
	}
	setVersion(attrDriverVersion, g.DriverVersion)
	if g.CUDADriverVersion > 0 {
		setVersion(attrCUDADriverVersion, cudaVersion(g.CUDADriverVersion))
	}
	if g.PCIBusID != "" {
		busID, err := normalizeBusID(g.PCIBusID)
		if err != nil {
			logger.Error(err, "Leaving out the PCI bus ID and PCIe root")
		} else {
			setString(deviceattribute.StandardDeviceAttributePCIBusID, busID)
			setString(deviceattribute.StandardDeviceAttributePCIeRoot, inv.pcieRoot(logger, g, busID))
			if numa, ok := inv.numaNode(logger, g, busID); ok {
				attrs[gpu.AttrNUMA] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(numa))}
			}
		}
	}

	maps.Copy(attrs, inv.Topology.Attributes())
	dev := kit.Device{
		API: resourceapi.Device{Name: name, Attributes: attrs},
		Env: map[string]string{"": name},
	}
	if g.MemoryBytes > 0 && g.MemoryBytes <= math.MaxInt64 {
		dev.API.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			capacityMemory: {Value: *resource.NewQuantity(int64(g.MemoryBytes), resource.BinarySI)},
		}
	}
	if g.ProductName != "" {
		dev.Env["PRODUCT"] = g.ProductName
	}
	if g.ProductName != "" || g.UUID != "" {
		dev.StatusData = map[string]string{}
		if g.ProductName != "" {
			dev.StatusData["productName"] = g.ProductName
		}
		if g.UUID != "" {
			dev.StatusData["uuid"] = g.UUID
		}
	}
	if g.UUID != "" {
		dev.Env["UUID"] = g.UUID
		dev.ClaimEnv = map[string]string{VisibleDevicesEnv: g.UUID}
	}
	if !inv.OmitDeviceNodes {
		dev.DeviceNodes = []kit.DeviceNode{inv.deviceNode(fmt.Sprintf("nvidia%d", g.Minor))}
	}
	return dev
}

// pcieRoot is the GPU's root complex, or "" when neither the backend nor
// sysfs knows it: a GPU without the attribute can still be allocated,
// just not by a claim that asks for GPUs under one root.
func (inv *Inventory) pcieRoot(logger klog.Logger, g GPU, busID string) string {
	if g.PCIeRoot != "" {
		return g.PCIeRoot
	}
	root, err := sysfsPCIeRoot(cmp.Or(inv.SysfsRoot, "/sys"), busID)
	if err != nil {
		logger.V(1).Info("Leaving out the PCIe root", "err", err)
		return ""
	}
	return root
}

// numaNode is the GPU's NUMA node, or false when neither the backend nor
// sysfs knows it, or the GPU has no NUMA affinity (numa_node -1): then the
// GPU has no NUMA attribute, rather than one that would match every other
// device without affinity.
func (inv *Inventory) numaNode(logger klog.Logger, g GPU, busID string) (int, bool) {
	if g.NUMANode != nil {
		return *g.NUMANode, *g.NUMANode >= 0
	}
	numa, err := sysfsNUMANode(cmp.Or(inv.SysfsRoot, "/sys"), busID)
	if err != nil {
		logger.V(1).Info("Leaving out the NUMA node", "err", err)
		return 0, false
	}
	return numa, true
}

// cudaVersion turns NVML's integer CUDA version into "major.minor":
// 12040 → "12.4". NVML's integer carries no patch level.
func cudaVersion(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}
