// Package fakecpu is the inventory of dralab's CPU driver, cpu.dralab.dev:
// a node's CPUs as core complexes (CCX, the cores that share a level-3
// cache), each a device a claim gets whole, for exclusive cores close to
// its GPUs and NICs.
//
// A complex is node resource itself: each device maps to as many of the
// node's CPUs as it has (nodeAllocatableResources, Kubernetes 1.37's
// DRANodeAllocatableResources), so the scheduler counts a claim's
// complexes against the node's cpu, and no pod is promised CPUs a
// complex already took. The complexes are spread over the node's two
// sockets, half on NUMA node 0 and half on NUMA node 1, and publish the
// standard resource.kubernetes.io/numaNode a claim aligns with a NIC's.
package fakecpu

import (
	"context"
	"fmt"
	"strconv"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/kit"
)

// The driver's names.
const (
	// DriverName is the CPU driver's DRA driver name.
	DriverName = "cpu.dralab.dev"
	// CDIKind is the CDI kind of its devices.
	CDIKind = "dralab.dev/cpu"
	// EnvPrefix names a container's per-complex variables:
	// DRALAB_CPU_<n> names the complex, DRALAB_CPU_<n>_CPUSET its CPUs.
	EnvPrefix = "DRALAB_CPU"
	// ClassAny is the class of every complex.
	ClassAny = DriverName
)

// Device attributes and capacity, unqualified (the driver's own domain).
const (
	// AttrType is TypeCCX for every device of the driver.
	AttrType = "type"
	TypeCCX  = "ccx"
	// AttrSocket is the complex's CPU socket.
	AttrSocket = "socket"
	// AttrCPUSet is the complex's logical CPUs, as Linux lists them
	// (cpuset.cpus): "16-31".
	AttrCPUSet = "cpuset"
	// CapacityCPUs is the complex's logical CPUs, what it maps to of the
	// node's cpu.
	CapacityCPUs = "cpus"
)

// Limits of an inventory.
const (
	MaxComplexes      = 64
	MaxCPUsPerComplex = 64
)

// Inventory is a node's CPUs: Complexes core complexes of CPUsPerComplex
// logical CPUs each, numbered from 0 in order.
type Inventory struct {
	Node           string
	Complexes      int
	CPUsPerComplex int
	Attributes     map[resourceapi.QualifiedName]resourceapi.DeviceAttribute
}

// CPUs is the node's number of logical CPUs.
func (inv *Inventory) CPUs() int { return inv.Complexes * inv.CPUsPerComplex }

// Validate says whether the inventory can be published, in the words of
// the driver's flags.
func (inv *Inventory) Validate() error {
	if inv.Complexes < 1 || inv.Complexes > MaxComplexes {
		return fmt.Errorf("complexes %d: must be between 1 and %d", inv.Complexes, MaxComplexes)
	}
	if inv.CPUsPerComplex < 1 || inv.CPUsPerComplex > MaxCPUsPerComplex {
		return fmt.Errorf("cpus-per-complex %d: must be between 1 and %d", inv.CPUsPerComplex, MaxCPUsPerComplex)
	}
	return nil
}

// Devices implements kit.Inventory: ccx-0 … ccx-<Complexes-1>, the first
// half on socket and NUMA node 0, the rest on 1.
func (inv *Inventory) Devices(context.Context) ([]kit.Device, error) {
	if err := inv.Validate(); err != nil {
		return nil, err
	}
	cpus := *resource.NewQuantity(int64(inv.CPUsPerComplex), resource.DecimalSI)
	half := (inv.Complexes + 1) / 2
	devices := make([]kit.Device, 0, inv.Complexes)
	for i := range inv.Complexes {
		name := fmt.Sprintf("ccx-%d", i)
		socket := int64(0)
		if i >= half {
			socket = 1
		}
		first := i * inv.CPUsPerComplex
		cpuset := fmt.Sprintf("%d-%d", first, first+inv.CPUsPerComplex-1)
		if inv.CPUsPerComplex == 1 {
			cpuset = strconv.Itoa(first)
		}
		attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:   {StringValue: ptr.To(TypeCCX)},
			AttrSocket: {IntValue: ptr.To(socket)},
			AttrCPUSet: {StringValue: ptr.To(cpuset)},
			deviceattribute.StandardDeviceAttributeNUMANode: {IntValue: ptr.To(socket)},
		}
		for k, v := range inv.Attributes {
			attrs[k] = v
		}
		devices = append(devices, kit.Device{
			API: resourceapi.Device{
				Name:       name,
				Attributes: attrs,
				Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{CapacityCPUs: {Value: cpus}},
				NodeAllocatableResources: map[v1.ResourceName]resourceapi.NodeAllocatableResource{
					v1.ResourceCPU: {Mapping: &resourceapi.NodeAllocatableMapping{DeviceMultiplier: ptr.To(cpus.DeepCopy())}},
				},
			},
			Env: map[string]string{"": name, "CPUSET": cpuset},
		})
	}
	return devices, nil
}

// DeviceClasses are the classes the driver's deployment creates.
func DeviceClasses() []resourceapi.DeviceClass {
	return []resourceapi.DeviceClass{{
		TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: ClassAny, Labels: map[string]string{"app.kubernetes.io/part-of": "dralab"}},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf("device.driver == %q", DriverName),
		}}}},
	}}
}
