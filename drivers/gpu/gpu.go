// Package gpu holds what every dralab GPU driver shares, whatever its
// inventory (fake profiles or NVML): the driver name, the CDI naming, the
// environment a prepared GPU sets, and the DeviceClasses, one for any GPU
// and one per tier.
package gpu

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/cel"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

const (
	// DriverName is the DRA driver name; it also qualifies the attributes.
	DriverName = "gpu.dralab.dev"
	// CDIKind is the CDI device kind of prepared GPUs.
	CDIKind = "dralab.dev/gpu"
	// EnvPrefix names the variables a prepared GPU sets: GPU_DEVICE_<n>,
	// GPU_DEVICE_<n>_PRODUCT and GPU_DEVICE_<n>_UUID for the claim's n-th GPU;
	// a MIG device sets GPU_DEVICE_<n>_PROFILE and _PARENT_UUID instead of
	// _UUID, and a share of a GPU GPU_DEVICE_<n>_SHARE_ID and
	// GPU_DEVICE_<n>_MEMORY_LIMIT (the memory its claim was given).
	EnvPrefix = "GPU_DEVICE"
	// ExtendedResource is what counting mode advertises through the
	// device-plugin API, the way GPU device plugins count.
	ExtendedResource = "dralab.dev/gpu"
	// ClassAny is the DeviceClass of any whole GPU of this driver.
	ClassAny = DriverName
	// ClassMIG is the DeviceClass of MIG devices: GPU instances of a
	// partitioned GPU, which a claim picks by profile.
	ClassMIG = "mig." + DriverName
	// ClassTimeSlice is the DeviceClass of time-sliced shares of a GPU:
	// each share runs on the whole GPU, taking turns with the others.
	ClassTimeSlice = "time-slice." + DriverName
	// NodeProfileLabel is the node label naming the node's GPU profile.
	NodeProfileLabel = "gpu.dralab.dev/profile"
	// NodeGPUsLabel is the node label with the node's number of fake GPUs.
	NodeGPUsLabel = "gpu.dralab.dev/gpus"
	// NodeModeLabel is the node label saying how the node's GPUs are
	// served: "dra", or "device-plugin" for GPUs that are only counted.
	NodeModeLabel = "gpu.dralab.dev/mode"
	// NodeDeviceMetadataLabel is "true" on a node whose GPU driver gives
	// containers device metadata files: what a workload (or a scenario)
	// that reads them selects nodes by.
	NodeDeviceMetadataLabel = "gpu.dralab.dev/device-metadata"
	// DevicePluginSocket is the socket the driver serves the device-plugin
	// API on, in the kubelet's device-plugin directory, where its GPUs
	// are counted.
	DevicePluginSocket = "dralab-gpu.sock"
)

// Tier is a family of GPU models that a workload treats alike.
type Tier struct {
	// Name is the tier's name and its class's prefix: h100 → h100.gpu.dralab.dev.
	Name string
	// Model is the word the product name contains, e.g. "H100" in
	// "NVIDIA H100 80GB HBM3".
	Model string
}

// Tiers in order of preference: what a prioritized list tries first.
var Tiers = []Tier{{"h100", "H100"}, {"a100", "A100"}, {"l4", "L4"}}

// ClassName is the DeviceClass of a tier.
func (t Tier) ClassName() string { return t.Name + "." + DriverName }

// Selector is the tier's CEL expression: the model is a word of the
// product name (\b), so that "L4" does not match "NVIDIA L40S". The
// expression is guarded with has(): a device without a product name must
// not match, and must not make the expression fail, which would leave the
// pod unschedulable instead of falling back to the next subrequest. (Optional
// access, .?productName.orValue(""), reads better but its estimated cost
// exceeds the API's limit for selectors.)
func (t Tier) Selector() string {
	attr := fmt.Sprintf("device.attributes[%q].productName", DriverName)
	return fmt.Sprintf(`has(%s) && %s.matches("\\b%s\\b")`, attr, attr, t.Model)
}

// driverSelector matches this driver's devices.
var driverSelector = fmt.Sprintf("device.driver == %q", DriverName)

// Attributes and capacities the classes and claims rely on, in the
// driver's domain, whatever the inventory.
const (
	// AttrType is TypeGPU for a whole GPU, TypeMIG for a MIG device,
	// TypeTimeSlice for a time-sliced share.
	AttrType = "type"
	// AttrProfile is a MIG device's GPU instance profile, e.g. 1g.10gb.
	AttrProfile = "profile"
	// AttrUUID is a whole GPU's UUID.
	AttrUUID = "uuid"
	// AttrParentUUID is a MIG device's or a time-sliced share's GPU's UUID.
	AttrParentUUID = "parentUUID"
	// AttrNUMA is the NUMA node of a GPU (and of its MIG devices), under
	// the driver's own name, as GPU vendors' drivers publish it, not the
	// standard resource.kubernetes.io/numaNode: a claim that aligns a GPU
	// with another driver's device by NUMA node normalises the two names
	// with a derived attribute (docs/gpu-nic.md).
	AttrNUMA = "numa"
	// AttrPartitioning is PartitioningMIG on a whole GPU published with its
	// MIG devices beside it, unset on the others: a claim for a GPU that
	// may be cut selects it with
	// device.attributes["gpu.dralab.dev"].?partitioning.orValue("") == "mig".
	AttrPartitioning = "partitioning"
	PartitioningMIG  = "mig"
	// AttrPartitionType names a partitioned or time-sliced GPU's devices'
	// partition type where the driver publishes it (--partition-types):
	// the GPU's name and PartitionWhole on the whole GPU, its name and the
	// profile and placement on a MIG device (gpu-0/1g.10gb@3), its name and
	// TypeTimeSlice on a share. A slice's partitionTypeAttribute names it,
	// and a pool status request counts by it.
	AttrPartitionType = "partitionType"
	PartitionWhole    = "whole"
	// CapacityMemory and CapacityMultiprocessors are a device's memory
	// and streaming multiprocessors.
	CapacityMemory          = "memory"
	CapacityMultiprocessors = "multiprocessors"

	TypeGPU       = "gpu"
	TypeMIG       = "mig"
	TypeTimeSlice = "time-slice"

	// AttrTimeSlices is the number of time-sliced shares a GPU offers, on
	// the GPU, its shares and its MIG devices: a claim for a MIG device of
	// a GPU that could be time-sliced instead selects it with
	// has(device.attributes["gpu.dralab.dev"].timeSlices).
	AttrTimeSlices = "timeSlices"
	// CounterTimeSlices counts a GPU's time-sliced shares in its counter
	// set: a share takes one, the whole GPU all of them.
	CounterTimeSlices = "time-slices"
	// GroupMIG and GroupTimeSliced are the compatibility groups of a GPU
	// offering MIG devices and time-sliced shares (Kubernetes 1.37's
	// DRADeviceCompatibilityGroups, alpha): devices drawing on one counter
	// set are allocated together only if they share a group, so a GPU runs
	// MIG instances or time-sliced shares, whichever was allocated first,
	// never both.
	GroupMIG        = "mig"
	GroupTimeSliced = "time-sliced"
)

// typeSelector matches devices of a type. Guarded with has(): a device
// without the attribute is not of the type, and must not make the
// selector fail.
func typeSelector(typ string) string {
	attr := fmt.Sprintf("device.attributes[%q].%s", DriverName, AttrType)
	return fmt.Sprintf(`has(%s) && %s == %q`, attr, attr, typ)
}

// DeviceClasses are the classes the driver's deployment creates. The
// tier classes and the class of any GPU select whole GPUs only: on a
// partitioned node a claim for "an H100" must not get a slice of one.
func DeviceClasses() []resourceapi.DeviceClass {
	whole := typeSelector(TypeGPU)
	classes := []resourceapi.DeviceClass{newClass(ClassAny, driverSelector, whole)}
	for _, t := range Tiers {
		classes = append(classes, newClass(t.ClassName(), driverSelector, whole, t.Selector()))
	}
	return append(classes,
		newClass(ClassMIG, driverSelector, typeSelector(TypeMIG)),
		newClass(ClassTimeSlice, driverSelector, typeSelector(TypeTimeSlice)))
}

// newClass makes a class of one selector, the conditions joined with &&:
// the allocator builds a device's CEL activation (every attribute
// converted) for each selector it evaluates, so one selector instead of
// three schedules firstAvailable pods over the tier classes two thirds
// faster on 500 nodes (docs/performance.md).
func newClass(name string, conditions ...string) resourceapi.DeviceClass {
	return resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/part-of": "dralab"}},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: all(conditions...),
		}}}},
	}
}

// all joins CEL conditions with &&, each in parentheses.
func all(conditions ...string) string {
	if len(conditions) == 1 {
		return conditions[0]
	}
	return "(" + strings.Join(conditions, ") && (") + ")"
}

// TierOf returns the tier whose class selects the device, "" for none (a
// MIG device, another driver's). It evaluates the classes' CEL selectors
// with the allocator's own CEL library, so it agrees with the scheduler by
// construction.
func TierOf(ctx context.Context, dev cel.Device) (string, error) {
	for _, t := range Tiers {
		sel, err := devices.CompileSelectors(driverSelector, typeSelector(TypeGPU), t.Selector())
		if err != nil {
			return "", err
		}
		ok, err := sel.Match(ctx, dev)
		if err != nil {
			return "", err
		}
		if ok {
			return t.Name, nil
		}
	}
	return "", nil
}
