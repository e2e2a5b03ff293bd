package fakegpu

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/pcilayout"
)

// Inventory is a node's fake GPUs: Count devices of one profile, whole,
// partitioned with MIG, or shared by memory.
type Inventory struct {
	Node    string
	Profile *Profile
	Count   int
	// Partitioning is "" (whole GPUs only) or PartitioningMIG.
	Partitioning string
	// Sharing is "" (each GPU in one claim at a time) or SharingMemory.
	Sharing string
	// TimeSlices is the number of time-sliced shares each GPU offers, 0
	// for none: devices <gpu>-ts-0 … that each take one of the GPU's
	// time-slices counters, the whole GPU taking them all. Partitioned as
	// well, the GPU offers MIG devices or shares, whichever a claim gets
	// first: its MIG devices and its shares declare the compatibility
	// groups gpu.GroupMIG and gpu.GroupTimeSliced (Kubernetes 1.37's
	// DRADeviceCompatibilityGroups, alpha: a scheduler without the gate
	// ignores such a pool, so the lab sets both only where the gate is on).
	TimeSlices int
	// Attach is "" (GPUs in the node) or AttachFabric.
	Attach string
	// Topology is where the node sits: every GPU and MIG device carries
	// its rack and NVLink domain as attributes.
	Topology gpu.Topology
	// HostMemoryOverhead publishes the profile's host-memory overhead on
	// every whole GPU as its nodeAllocatableResources (Kubernetes 1.37's
	// DRANodeAllocatableResources, alpha: an API server without the gate
	// drops the field, so the lab sets this only where the gate is on).
	HostMemoryOverhead bool
	// PartitionTypes gives every device of a partitioned or time-sliced
	// GPU its partition type (gpu.AttrPartitionType, setPartitionType):
	// the driver then names the attribute as its slices'
	// partitionTypeAttribute (Kubernetes 1.37's DRAPartitionableDevicesType,
	// alpha), which a ResourcePoolStatusRequest counts by.
	PartitionTypes bool
}

// Partitioning and sharing modes.
const (
	// PartitioningMIG publishes every MIG placement of each GPU besides the
	// whole GPU, all drawing from the GPU's counters.
	PartitioningMIG = "mig"
	// SharingMemory lets claims share a GPU, each taking some of its memory.
	SharingMemory = "memory"
	// AttachFabric models GPUs in a PCIe/CXL switch, attached to the node
	// when a claim gets them: each whole GPU carries the binding condition
	// ConditionAttached and the failure condition ConditionAttachFailed, and
	// the scheduler binds the pod only once something (the lab's attach
	// controller) has set one of them in the claim's device status.
	AttachFabric = "fabric"
)

// AttrAttach is "fabric" on a fabric-attached GPU, unset on a GPU in the
// node: device.attributes["gpu.dralab.dev"].attach == "fabric".
const AttrAttach = "attach"

// AttrSharing is "memory" on a GPU that claims share by memory, unset on
// the others: a claim for a share selects it with
// device.attributes["gpu.dralab.dev"].?sharing.orValue("") == "memory",
// since a capacity request alone is met by a whole GPU too.
const AttrSharing = "sharing"

// Binding conditions of a fabric-attached GPU: condition types in the
// claim's status.devices[].conditions. The API takes qualified names, as
// label keys are: a DNS prefix of ours and a name.
const (
	ConditionAttached     = "dralab.dev/attached"
	ConditionAttachFailed = "dralab.dev/attach-failed"
)

// Validate says whether the inventory can be published, naming what is
// wrong in the words of the driver's flags.
func (inv *Inventory) Validate() error {
	if inv.Profile == nil {
		return errors.New("a fake inventory needs a GPU profile")
	}
	switch inv.Partitioning {
	case "":
	case PartitioningMIG:
		if inv.Profile.MIG == nil {
			return fmt.Errorf("partitioning %q: GPU profile %s has no MIG geometry; profiles with MIG: %s", inv.Partitioning, inv.Profile.Name, strings.Join(MIGProfileNames(), ", "))
		}
	default:
		return fmt.Errorf("partitioning %q: want %s or nothing", inv.Partitioning, PartitioningMIG)
	}
	switch inv.Sharing {
	case "":
	case SharingMemory:
		if inv.Partitioning != "" {
			return fmt.Errorf("sharing %q: a GPU is partitioned or shared, not both", inv.Sharing)
		}
	default:
		return fmt.Errorf("sharing %q: want %s or nothing", inv.Sharing, SharingMemory)
	}
	switch {
	case inv.TimeSlices < 0 || inv.TimeSlices > MaxTimeSlices:
		return fmt.Errorf("time-slices %d: want between 0 and %d", inv.TimeSlices, MaxTimeSlices)
	case inv.TimeSlices > 0 && inv.Sharing != "":
		return fmt.Errorf("time-slices %d: a GPU shared by memory is not time-sliced too", inv.TimeSlices)
	case inv.PartitionTypes && !inv.counted():
		return errors.New("partition-types: the GPUs are neither partitioned nor time-sliced; give partitioning or time-slices too")
	}
	if inv.HostMemoryOverhead && inv.Profile.HostMemoryOverhead.Sign() <= 0 {
		return fmt.Errorf("host-memory-overhead: GPU profile %s declares no hostMemoryOverhead", inv.Profile.Name)
	}
	switch inv.Attach {
	case "":
	case AttachFabric:
		if inv.Partitioning != "" || inv.Sharing != "" || inv.TimeSlices > 0 {
			return fmt.Errorf("attach %q: a fabric-attached GPU is attached whole, to one claim: not with partitioning, sharing or time slices", inv.Attach)
		}
	default:
		return fmt.Errorf("attach %q: want %s or nothing", inv.Attach, AttachFabric)
	}
	return nil
}

// MaxTimeSlices bounds a GPU's time-sliced shares.
const MaxTimeSlices = 16

// MIGProfileNames lists the built-in profiles with MIG geometry, sorted.
func MIGProfileNames() []string {
	profiles, err := Builtin()
	if err != nil {
		return nil
	}
	var names []string
	for n, p := range profiles {
		if p.MIG != nil {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

var (
	_ kit.NodeWideInventory = &Inventory{}
	_ kit.CounterInventory  = &Inventory{}
)

// NodeEnv names the node in a container of any of its fake GPUs: the fake
// inventory's node-wide edit, as real GPUs' control device files are.
const NodeEnv = "DRALAB_GPU_NODE"

// NodeEdits implements kit.NodeWideInventory.
func (inv *Inventory) NodeEdits() kit.ContainerEdits {
	return kit.ContainerEdits{Env: map[string]string{NodeEnv: inv.Node}}
}

// Devices implements kit.Inventory: gpu-0 … gpu-<Count-1>, with UUIDs
// derived from the node name and index (stable across restarts, distinct
// across nodes) and PCI addresses laid out like a real server. Partitioned,
// each GPU comes after its MIG placements, smallest first: the allocator
// takes the first device that fits, so a small request must meet a small
// placement first.
func (inv *Inventory) Devices(context.Context) ([]kit.Device, error) {
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	p := inv.Profile
	cc, err := gpu.NormalizeVersion(p.CUDAComputeCapability)
	if err != nil {
		return nil, err
	}
	driverVersion, err := gpu.NormalizeVersion(p.DriverVersion)
	if err != nil {
		return nil, err
	}
	cudaVersion, err := gpu.NormalizeVersion(p.CUDADriverVersion)
	if err != nil {
		return nil, err
	}
	var devices []kit.Device
	for i := range inv.Count {
		first := len(devices)
		name := fmt.Sprintf("gpu-%d", i)
		uuid := gpu.DeviceUUID(inv.Node, i)
		slot := pcilayout.GPU(i)
		busID, pcieRoot := slot.BusID(), slot.PCIeRoot()
		// What a GPU and its MIG devices share: the parent's product.
		product := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			"productName":                     {StringValue: ptr.To(p.ProductName)},
			"brand":                           {StringValue: ptr.To(p.Brand)},
			"architecture":                    {StringValue: ptr.To(p.Architecture)},
			"cudaComputeCapability":           {VersionValue: ptr.To(cc)},
			"driverVersion":                   {VersionValue: ptr.To(driverVersion)},
			"cudaDriverVersion":               {VersionValue: ptr.To(cudaVersion)},
			"resource.kubernetes.io/pcieRoot": {StringValue: ptr.To(pcieRoot)},
			gpu.AttrNUMA:                      {IntValue: ptr.To(int64(slot.NUMANode))},
		}
		maps.Copy(product, inv.Topology.Attributes())
		whole := kit.Device{
			API: resourceapi.Device{
				Name: name,
				Attributes: with(product, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					gpu.AttrType:                      {StringValue: ptr.To(gpu.TypeGPU)},
					"index":                           {IntValue: ptr.To(int64(i))},
					"minor":                           {IntValue: ptr.To(int64(i))},
					"uuid":                            {StringValue: ptr.To(uuid)},
					"resource.kubernetes.io/pciBusID": {StringValue: ptr.To(busID)},
				}),
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					gpu.CapacityMemory: {Value: p.Memory},
				},
			},
			Env:        map[string]string{"": name, "PRODUCT": p.ProductName, "UUID": uuid},
			StatusData: map[string]string{"uuid": uuid, "productName": p.ProductName},
		}
		if inv.HostMemoryOverhead {
			whole.API.NodeAllocatableResources = map[v1.ResourceName]resourceapi.NodeAllocatableResource{
				v1.ResourceMemory: {Overhead: &resourceapi.NodeAllocatableOverhead{PerPod: ptr.To(p.HostMemoryOverhead.DeepCopy())}},
			}
		}
		if inv.TimeSlices > 0 {
			// The GPU, its MIG devices and its shares all say so.
			product[gpu.AttrTimeSlices] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(inv.TimeSlices))}
			whole.API.Attributes[gpu.AttrTimeSlices] = product[gpu.AttrTimeSlices]
		}
		if inv.counted() {
			counterSet := CounterSetName(i)
			whole.API.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: counterSet, Counters: inv.counters()}}
		}
		switch {
		case inv.Partitioning == PartitioningMIG:
			counterSet := CounterSetName(i)
			whole.API.Capacity[gpu.CapacityMultiprocessors] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(p.Multiprocessors), resource.DecimalSI)}
			whole.API.Attributes[gpu.AttrPartitioning] = resourceapi.DeviceAttribute{StringValue: ptr.To(gpu.PartitioningMIG)}
			migs := gpu.MIGDevices(name, uuid, p.ProductName, counterSet, product, p.MIG)
			if inv.TimeSlices > 0 {
				for j := range migs {
					migs[j].API.ConsumesCounters[0].CompatibilityGroups = []string{gpu.GroupMIG}
				}
			}
			devices = append(devices, migs...)
			devices = append(devices, inv.timeSlices(name, uuid, CounterSetName(i), product, gpu.GroupTimeSliced)...)
		case inv.TimeSlices > 0:
			// Without MIG there is nothing to exclude: the whole GPU takes
			// every time slice, as counters say.
			devices = append(devices, inv.timeSlices(name, uuid, CounterSetName(i), product, "")...)
		case inv.Sharing == SharingMemory:
			share(&whole.API, p)
		case inv.Attach == AttachFabric:
			whole.API.BindingConditions = []string{ConditionAttached}
			whole.API.BindingFailureConditions = []string{ConditionAttachFailed}
			// A claim may ask for fabric GPUs (or avoid them) by selector.
			whole.API.Attributes[AttrAttach] = resourceapi.DeviceAttribute{StringValue: ptr.To(AttachFabric)}
		}
		devices = append(devices, whole)
		if inv.PartitionTypes {
			for j := range devices[first:] {
				setPartitionType(&devices[first+j].API, name)
			}
		}
	}
	return devices, nil
}

// setPartitionType gives a device of GPU parent its partition type
// (gpu.AttrPartitionType): devices of one type must consume the same
// counters of the same counter set, or the pool status controller refuses
// the pool (PartitionCostMismatch). A MIG instance's memory slices depend
// on its placement, so each placement is a type of its own,
// "gpu-0/1g.10gb@3"; the time-sliced shares of a GPU are one type,
// "gpu-0/time-slice"; the whole GPU is "gpu-0/whole".
func setPartitionType(d *resourceapi.Device, parent string) {
	typ := parent + "/" + gpu.PartitionWhole
	switch ptr.Deref(d.Attributes[gpu.AttrType].StringValue, "") {
	case gpu.TypeMIG:
		start := d.Name[strings.LastIndex(d.Name, "-")+1:]
		typ = parent + "/" + ptr.Deref(d.Attributes[gpu.AttrProfile].StringValue, "") + "@" + start
	case gpu.TypeTimeSlice:
		typ = parent + "/" + gpu.TypeTimeSlice
	}
	d.Attributes[gpu.AttrPartitionType] = resourceapi.DeviceAttribute{StringValue: ptr.To(typ)}
}

// CounterSets implements kit.CounterInventory: a partitioned GPU's counter
// set holds each capacity dimension its instances draw from and one
// counter per memory slice; none without partitioning.
func (inv *Inventory) CounterSets(context.Context) ([]resourceapi.CounterSet, error) {
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	if !inv.counted() {
		return nil, nil
	}
	sets := make([]resourceapi.CounterSet, 0, inv.Count)
	for i := range inv.Count {
		sets = append(sets, resourceapi.CounterSet{Name: CounterSetName(i), Counters: inv.counters()})
	}
	return sets, nil
}

// counted says whether each GPU has a counter set: partitioned, or
// time-sliced.
func (inv *Inventory) counted() bool {
	return inv.Partitioning == PartitioningMIG || inv.TimeSlices > 0
}

// counters are a GPU's counter set, which its whole device consumes: the
// MIG geometry's, and its time slices.
func (inv *Inventory) counters() map[string]resourceapi.Counter {
	c := map[string]resourceapi.Counter{}
	if inv.Partitioning == PartitioningMIG {
		c = inv.Profile.MIG.Counters(inv.Profile.Memory, inv.Profile.Multiprocessors)
	}
	if inv.TimeSlices > 0 {
		c[gpu.CounterTimeSlices] = resourceapi.Counter{Value: *resource.NewQuantity(int64(inv.TimeSlices), resource.DecimalSI)}
	}
	return c
}

// TimeSliceName names share j of GPU parent: gpu-0-ts-1.
func TimeSliceName(parent string, j int) string { return fmt.Sprintf("%s-ts-%d", parent, j) }

// timeSlices are GPU parent's time-sliced shares: each runs on the whole
// GPU (its memory and multiprocessors are the GPU's), takes one time slice
// of its counter set, and declares group, if any.
func (inv *Inventory) timeSlices(parent, parentUUID, counterSet string, product map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, group string) []kit.Device {
	p := inv.Profile
	out := make([]kit.Device, 0, inv.TimeSlices)
	for j := range inv.TimeSlices {
		name := TimeSliceName(parent, j)
		consumes := resourceapi.DeviceCounterConsumption{
			CounterSet: counterSet,
			Counters:   map[string]resourceapi.Counter{gpu.CounterTimeSlices: {Value: resource.MustParse("1")}},
		}
		if group != "" {
			consumes.CompatibilityGroups = []string{group}
		}
		capacity := map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{gpu.CapacityMemory: {Value: p.Memory}}
		if p.Multiprocessors > 0 {
			capacity[gpu.CapacityMultiprocessors] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(p.Multiprocessors), resource.DecimalSI)}
		}
		out = append(out, kit.Device{
			API: resourceapi.Device{
				Name: name,
				Attributes: with(product, map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					gpu.AttrType:       {StringValue: ptr.To(gpu.TypeTimeSlice)},
					gpu.AttrParentUUID: {StringValue: ptr.To(parentUUID)},
				}),
				Capacity:         capacity,
				ConsumesCounters: []resourceapi.DeviceCounterConsumption{consumes},
			},
			Env:        map[string]string{"": name, "PARENT_UUID": parentUUID, "PRODUCT": p.ProductName, "TIME_SLICES": fmt.Sprint(inv.TimeSlices)},
			StatusData: map[string]string{"parentUUID": parentUUID, "productName": p.ProductName},
		})
	}
	return out
}

// CounterSetName names GPU i's counter set.
func CounterSetName(i int) string { return fmt.Sprintf("gpu-%d-counters", i) }

// ShareStep is the grain of a shared GPU's memory: a claim's request is
// rounded up to whole steps, at least one.
var ShareStep = resource.MustParse("1Gi")

// share lets claims share a GPU by memory: each takes what it asks
// (capacity.requests.memory) in whole steps, and a claim that does not say
// takes as much as one claim may, so it has the GPU to itself. Every other
// capacity defaults to nothing, or a claim asking only for memory would
// take all of it and leave the GPU to no one else.
func share(dev *resourceapi.Device, p *Profile) {
	dev.AllowMultipleAllocations = ptr.To(true)
	dev.Attributes[AttrSharing] = resourceapi.DeviceAttribute{StringValue: ptr.To(SharingMemory)}
	most := *resource.NewQuantity(p.Memory.Value()/ShareStep.Value()*ShareStep.Value(), resource.BinarySI)
	mem := dev.Capacity[gpu.CapacityMemory]
	mem.RequestPolicy = &resourceapi.CapacityRequestPolicy{
		Default:    ptr.To(most),
		ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(ShareStep), Max: ptr.To(most), Step: ptr.To(ShareStep)},
	}
	dev.Capacity[gpu.CapacityMemory] = mem
	if p.Multiprocessors > 0 {
		dev.Capacity[gpu.CapacityMultiprocessors] = resourceapi.DeviceCapacity{
			Value:         *resource.NewQuantity(int64(p.Multiprocessors), resource.DecimalSI),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: resource.NewQuantity(0, resource.DecimalSI)},
		}
	}
}

// with returns the union of two attribute maps.
func with(a, b map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, len(a)+len(b))
	maps.Copy(out, a)
	maps.Copy(out, b)
	return out
}
