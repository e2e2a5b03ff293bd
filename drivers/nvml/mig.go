package nvml

import (
	"context"
	"encoding/json"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
)

// MIGPlacement is where a MIG device lives: a GPU instance of a profile at
// a memory slice of a GPU.
type MIGPlacement struct {
	// ParentUUID is the GPU's UUID.
	ParentUUID string `json:"parentUUID"`
	// ProfileID is NVML's GPU instance profile ID.
	ProfileID int `json:"profileID"`
	// Start is the first memory slice of the placement.
	Start int `json:"start"`
}

// MIGInstance is a MIG device that prepare made: the GPU instance at its
// placement and the compute instance in it that takes all its slices.
type MIGInstance struct {
	MIGPlacement      `json:",inline"`
	GPUInstanceID     int `json:"gpuInstanceID"`
	ComputeInstanceID int `json:"computeInstanceID"`
	// UUID is the MIG device's UUID ("MIG-…"), by which the NVIDIA
	// container toolkit gives a container the instance.
	UUID string `json:"uuid"`
}

// MIGManager is a Lister that can create and destroy MIG devices on GPUs
// whose MIG mode is enabled.
type MIGManager interface {
	// CreateMIG creates the GPU and compute instance at a placement, or
	// adopts those that an interrupted earlier call made there: never two.
	CreateMIG(ctx context.Context, p MIGPlacement) (MIGInstance, error)
	// DestroyMIG destroys the compute instances and the GPU instance at a
	// placement; nothing there is no error.
	DestroyMIG(ctx context.Context, p MIGPlacement) error
}

var _ kit.DevicePreparer = &Inventory{}
var _ kit.CounterInventory = &Inventory{}

// migDevices publishes a GPU in MIG mode as the fake driver publishes a
// partitioned one: its counter set, the whole GPU consuming all of it, and
// every placement of every profile, smallest first. It records each MIG
// device's placement, which prepare creates.
func (inv *Inventory) migDevices(g GPU, whole *kit.Device) ([]kit.Device, resourceapi.CounterSet) {
	name := whole.API.Name
	set := resourceapi.CounterSet{Name: name + "-counters", Counters: g.MIG.Counters(*resource.NewQuantity(int64(g.MemoryBytes), resource.BinarySI), g.Multiprocessors)}
	if g.Multiprocessors > 0 {
		whole.API.Capacity[gpu.CapacityMultiprocessors] = resourceapi.DeviceCapacity{Value: *resource.NewQuantity(int64(g.Multiprocessors), resource.DecimalSI)}
	}
	whole.API.ConsumesCounters = []resourceapi.DeviceCounterConsumption{{CounterSet: set.Name, Counters: set.Counters}}
	product := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	for attr, v := range whole.API.Attributes {
		switch attr {
		case attrType, attrIndex, attrMinor, attrUUID, "resource.kubernetes.io/pciBusID":
		default:
			product[attr] = v
		}
	}
	whole.API.Attributes[gpu.AttrPartitioning] = resourceapi.DeviceAttribute{StringValue: ptr.To(gpu.PartitioningMIG)}
	for _, mp := range g.MIG.Profiles {
		for _, start := range mp.Placements {
			inv.placements[gpu.MIGDeviceName(name, mp, start)] = MIGPlacement{ParentUUID: g.UUID, ProfileID: mp.ID, Start: start}
		}
	}
	devs := gpu.MIGDevices(name, g.UUID, g.ProductName, set.Name, product, g.MIG)
	return devs, set
}

// CounterSets implements kit.CounterInventory: one set per GPU in MIG mode.
func (inv *Inventory) CounterSets(ctx context.Context) ([]resourceapi.CounterSet, error) {
	l, err := inv.list(ctx)
	if err != nil {
		return nil, err
	}
	return l.sets, nil
}

// PrepareDevice implements kit.DevicePreparer: a MIG device's GPU and
// compute instance are created at its placement; a whole GPU needs nothing.
// The container sees the MIG device through NVIDIA_VISIBLE_DEVICES, by its
// UUID, which exists only once the instances do.
func (inv *Inventory) PrepareDevice(ctx context.Context, device string) (kit.DevicePrepared, error) {
	p, mgr, err := inv.migPlacement(ctx, device)
	if err != nil || mgr == nil {
		return kit.DevicePrepared{}, err
	}
	inst, err := mgr.CreateMIG(ctx, p)
	if err != nil {
		return kit.DevicePrepared{}, err
	}
	state, err := json.Marshal(inst)
	if err != nil {
		return kit.DevicePrepared{}, err
	}
	return kit.DevicePrepared{
		State: state,
		Env: map[string]string{
			"UUID":                inst.UUID,
			"GPU_INSTANCE_ID":     fmt.Sprint(inst.GPUInstanceID),
			"COMPUTE_INSTANCE_ID": fmt.Sprint(inst.ComputeInstanceID),
		},
		ClaimEnv:   map[string]string{VisibleDevicesEnv: inst.UUID},
		StatusData: map[string]string{"uuid": inst.UUID},
	}, nil
}

// UnprepareDevice implements kit.DevicePreparer: a MIG device's instances
// are destroyed. The placement comes from the device's name, whatever the
// state says: after an interrupted prepare there is no state, and the
// instances at the placement are the claim's, as the allocator gave the
// placement to it alone.
func (inv *Inventory) UnprepareDevice(ctx context.Context, device string, state json.RawMessage) error {
	p, mgr, err := inv.migPlacement(ctx, device)
	if err != nil || mgr == nil {
		return err
	}
	if len(state) > 0 {
		var inst MIGInstance
		if err := json.Unmarshal(state, &inst); err != nil {
			return fmt.Errorf("MIG device %s: checkpointed state: %w", device, err)
		}
		if inst.MIGPlacement != p {
			return fmt.Errorf("MIG device %s was made at %+v, but the device is now at %+v: was the GPU replaced?", device, inst.MIGPlacement, p)
		}
	}
	return mgr.DestroyMIG(ctx, p)
}

// migPlacement is a MIG device's placement and the Lister that manages
// it; a device that is no MIG device has neither.
func (inv *Inventory) migPlacement(ctx context.Context, device string) (MIGPlacement, MIGManager, error) {
	if _, err := inv.list(ctx); err != nil {
		return MIGPlacement{}, nil, err
	}
	p, ok := inv.placements[device]
	if !ok {
		return MIGPlacement{}, nil, nil
	}
	mgr, ok := inv.Lister.(MIGManager)
	if !ok {
		return MIGPlacement{}, nil, fmt.Errorf("MIG device %s: the GPU lister (%T) cannot create MIG instances", device, inv.Lister)
	}
	return p, mgr, nil
}
