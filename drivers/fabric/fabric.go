// Package fabric is dralab's driver of network-attached accelerators,
// fabric.dralab.dev: GPUs in an enclosure of a rack or a fabric (PCIe or CXL
// switches) that several nodes reach, rather than GPUs inside one node.
//
// Such devices are published once, for every node that reaches them, by a
// controller (Publish), not by each node's kubelet plugin: a pool is the
// enclosure, and its slice says which nodes reach it, in one of the three
// ways the API has — a node selector (the nodes of a rack), all nodes (a
// fabric every node is on), or per device (each device its own node
// selector). The kubelet plugin of every node (the kit, Devices) prepares the
// devices its node reaches and publishes none; the allocator matches the
// pool's nodes for each candidate node, as it does for every non-local
// device.
package fabric

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/kit"
)

// The driver's names.
const (
	// DriverName is the driver's DRA driver name.
	DriverName = "fabric.dralab.dev"
	// CDIKind is the CDI kind of its devices.
	CDIKind = "fabric.dralab.dev/gpu"
	// EnvPrefix names a container's per-device variables.
	EnvPrefix = "DRALAB_FABRIC"
)

// Device attributes and capacity (the driver's own domain).
const (
	// AttrType is TypeGPU for every device of the driver.
	AttrType = "type"
	TypeGPU  = "gpu"
	// AttrModel names the GPU model (a fake GPU profile's name).
	AttrModel = "model"
	// AttrEnclosure is the pool's name: the enclosure the device sits in.
	AttrEnclosure = "enclosure"
	// AttrIndex is the device's place in its enclosure.
	AttrIndex = "index"
	// AttrReach says how the device is reached: ReachNodeSelector,
	// ReachAllNodes or ReachPerDevice.
	AttrReach = "reach"
	// CapacityMemory is the device's memory.
	CapacityMemory = "memory"
)

// How a pool's devices are reached, as its slice says it.
const (
	ReachNodeSelector = "nodeSelector"
	ReachAllNodes     = "allNodes"
	ReachPerDevice    = "perDevice"
)

// A Pool is an enclosure of network-attached GPUs: Count GPUs of a model
// with Memory each, reached by the nodes whose labels match NodeSelector, by
// every node (AllNodes), or per device (PerDevice: device i by the nodes
// whose labels match PerDevice[i]). Exactly one of the three is set.
type Pool struct {
	Name   string            `json:"name"`
	Model  string            `json:"model"`
	Memory resource.Quantity `json:"memory"`
	Count  int               `json:"count"`

	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	AllNodes     bool                `json:"allNodes,omitempty"`
	PerDevice    []map[string]string `json:"perDevice,omitempty"`

	// Attach: the GPUs are attached to the node a pod goes to, through
	// the fabric, before the pod binds (binding conditions, KEP-5007):
	// each device carries ConditionAttached and ConditionAttachFailed and
	// binds to the node it is allocated on (bindsToNode), and something
	// (the lab's attach controller, a fabric manager) sets one of them in
	// the claim's status.
	Attach bool `json:"attach,omitempty"`
	// Failed are the GPUs whose attachment failed or never came: each is
	// tainted TaintAttachFailed (NoSchedule), so that the allocator passes
	// it over.
	Failed []int `json:"failed,omitempty"`
}

// Binding conditions of an attached GPU, as dralab's fabric-attached GPUs
// in nodes have them (drivers/fakegpu), and the taint of a GPU that did
// not attach.
const (
	ConditionAttached     = fakegpu.ConditionAttached
	ConditionAttachFailed = fakegpu.ConditionAttachFailed
	TaintAttachFailed     = "fabric.dralab.dev/attach-failed"
)

// Validate says what is wrong with the pool, in the words of its fields.
func (p Pool) Validate() error {
	if errs := validation.IsDNS1123Label(p.Name); len(errs) > 0 {
		return fmt.Errorf("pool name %q: %v", p.Name, errs)
	}
	if p.Count < 1 || p.Count > resourceapi.ResourceSliceMaxDevices {
		return fmt.Errorf("pool %s: count %d, want 1 to %d (one slice)", p.Name, p.Count, resourceapi.ResourceSliceMaxDevices)
	}
	if p.Model == "" {
		return fmt.Errorf("pool %s: model is empty", p.Name)
	}
	set := 0
	if len(p.NodeSelector) > 0 {
		set++
	}
	if p.AllNodes {
		set++
	}
	if p.PerDevice != nil {
		set++
		if len(p.PerDevice) != p.Count {
			return fmt.Errorf("pool %s: perDevice has %d node selectors for %d devices, want one each", p.Name, len(p.PerDevice), p.Count)
		}
		for i, sel := range p.PerDevice {
			if len(sel) == 0 {
				return fmt.Errorf("pool %s: perDevice[%d] selects no labels", p.Name, i)
			}
		}
	}
	if set != 1 {
		return fmt.Errorf("pool %s: set exactly one of nodeSelector, allNodes and perDevice (%d set)", p.Name, set)
	}
	for _, i := range p.Failed {
		if i < 0 || i >= p.Count {
			return fmt.Errorf("pool %s: failed GPU %d, want 0 to %d", p.Name, i, p.Count-1)
		}
	}
	for i := range p.Count {
		if errs := validation.IsDNS1123Label(p.DeviceName(i)); len(errs) > 0 {
			return fmt.Errorf("pool %s: device name %q: %v", p.Name, p.DeviceName(i), errs)
		}
	}
	return nil
}

// Reach is how the pool's devices are reached: ReachNodeSelector,
// ReachAllNodes or ReachPerDevice.
func (p Pool) Reach() string {
	switch {
	case p.AllNodes:
		return ReachAllNodes
	case p.PerDevice != nil:
		return ReachPerDevice
	default:
		return ReachNodeSelector
	}
}

// DeviceName names device i: unique over the lab's pools, since one node's
// plugin prepares the devices of every pool its node reaches.
func (p Pool) DeviceName(i int) string { return p.Name + "-gpu-" + strconv.Itoa(i) }

// selector is a node selector of nodes with every label of labels.
func selector(labels map[string]string) *v1.NodeSelector {
	var exprs []v1.NodeSelectorRequirement
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		exprs = append(exprs, v1.NodeSelectorRequirement{Key: k, Operator: v1.NodeSelectorOpIn, Values: []string{labels[k]}})
	}
	return &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: exprs}}}
}

// apiDevice is device i as published.
func (p Pool) apiDevice(i int) resourceapi.Device {
	d := resourceapi.Device{
		Name: p.DeviceName(i),
		Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
			AttrType:      {StringValue: ptr.To(TypeGPU)},
			AttrModel:     {StringValue: ptr.To(p.Model)},
			AttrEnclosure: {StringValue: ptr.To(p.Name)},
			AttrIndex:     {IntValue: ptr.To(int64(i))},
			AttrReach:     {StringValue: ptr.To(p.Reach())},
		},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			CapacityMemory: {Value: p.Memory},
		},
	}
	switch p.Reach() {
	case ReachPerDevice:
		d.NodeSelector = selector(p.PerDevice[i])
	}
	if p.Attach {
		d.BindingConditions = []string{ConditionAttached}
		d.BindingFailureConditions = []string{ConditionAttachFailed}
		d.BindsToNode = ptr.To(true)
	}
	if slices.Contains(p.Failed, i) {
		d.Taints = []resourceapi.DeviceTaint{{Key: TaintAttachFailed, Value: "true", Effect: resourceapi.DeviceTaintEffectNoSchedule}}
	}
	return d
}

// slicePool is the pool as the ResourceSlice controller publishes it: one
// slice, with the pool's node selection.
func (p Pool) slicePool() resourceslice.Pool {
	var devs []resourceapi.Device
	for i := range p.Count {
		devs = append(devs, p.apiDevice(i))
	}
	out := resourceslice.Pool{Slices: []resourceslice.Slice{{Devices: devs}}}
	switch p.Reach() {
	case ReachAllNodes:
		out.AllNodes = true
	case ReachPerDevice:
		out.Slices[0].PerDeviceNodeSelection = ptr.To(true)
	default:
		out.NodeSelector = selector(p.NodeSelector)
	}
	return out
}

// Resources are the pools as the driver's controller publishes them.
func Resources(pools []Pool) (*resourceslice.DriverResources, error) {
	res := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	seen := map[string]bool{}
	for _, p := range pools {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if seen[p.Name] {
			return nil, fmt.Errorf("pool %s is listed twice", p.Name)
		}
		seen[p.Name] = true
		res.Pools[p.Name] = p.slicePool()
	}
	return res, nil
}

// Reached are the indexes of the pool's devices that a node with these
// labels reaches, matched as the scheduler matches a slice's node selection
// (the API's node selector, evaluated by Kubernetes' own node-affinity code).
func (p Pool) Reached(node *v1.Node) ([]int, error) {
	var out []int
	for i := range p.Count {
		var sel *v1.NodeSelector
		switch p.Reach() {
		case ReachAllNodes:
			out = append(out, i)
			continue
		case ReachPerDevice:
			sel = selector(p.PerDevice[i])
		default:
			sel = selector(p.NodeSelector)
		}
		ok, err := nodeaffinity.NewLazyErrorNodeSelector(sel).Match(node)
		if err != nil {
			return nil, fmt.Errorf("pool %s, device %d: %w", p.Name, i, err)
		}
		if ok {
			out = append(out, i)
		}
	}
	return out, nil
}

// Inventory is what one node's kubelet plugin prepares: the devices of
// the pools that its node reaches, each of its pool (kit.Device.Pool).
type Inventory struct {
	Pools []Pool
	Node  *v1.Node
}

// Devices implements kit.Inventory.
func (inv Inventory) Devices(context.Context) ([]kit.Device, error) {
	var out []kit.Device
	for _, p := range inv.Pools {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		reached, err := p.Reached(inv.Node)
		if err != nil {
			return nil, err
		}
		for _, i := range reached {
			api := p.apiDevice(i)
			api.NodeSelector = nil // the pool's publisher says who reaches it
			out = append(out, kit.Device{
				API:        api,
				Pool:       p.Name,
				Env:        map[string]string{"": api.Name, "ENCLOSURE": p.Name, "MODEL": p.Model},
				StatusData: map[string]string{"enclosure": p.Name, "model": p.Model},
			})
		}
	}
	return out, nil
}

// ReadPools reads a file of pools (a JSON list), each checked.
func ReadPools(file string) ([]Pool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var pools []Pool
	if err := json.Unmarshal(data, &pools); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	if _, err := Resources(pools); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return pools, nil
}

// Publish starts the driver's controller: it publishes the pools' slices,
// and keeps them as given until ctx ends (a slice deleted or changed by
// anyone else is written again). Stop the returned controller to wait for
// it.
func Publish(ctx context.Context, client kubernetes.Interface, pools []Pool) (*resourceslice.Controller, error) {
	res, err := Resources(pools)
	if err != nil {
		return nil, err
	}
	return resourceslice.StartController(ctx, resourceslice.Options{DriverName: DriverName, KubeClient: client, Resources: res})
}

// DeviceClass is the driver's DeviceClass: every device of the driver.
func DeviceClass() resourceapi.DeviceClass {
	return resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + DriverName + `"`},
		}}},
	}
}
