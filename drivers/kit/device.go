package kit

import (
	"context"
	"encoding/json"

	resourceapi "k8s.io/api/resource/v1"
)

// Device is one device of an inventory.
type Device struct {
	// API is the device as published in the node's ResourceSlice.
	API resourceapi.Device
	// Env is what the device sets in a container, keyed by suffix: a
	// prepared device n of a claim sets <EnvPrefix>_<n>=<Env[""]> and
	// <EnvPrefix>_<n>_<key>=<value> for the other keys.
	Env map[string]string
	// ClaimEnv is what the device sets once per claim rather than per
	// device: the values of a key over the claim's devices are joined with
	// commas, as NVIDIA_VISIBLE_DEVICES lists a claim's GPUs.
	ClaimEnv map[string]string
	// DeviceNodes are host device files the container gets.
	DeviceNodes []DeviceNode
	// StatusData is what the driver writes as the device's data in the
	// status of a claim it prepared (status.devices[].data), e.g. the GPU's
	// UUID and product.
	StatusData map[string]string
	// NetworkData is what a network device writes as its network data in
	// the status of a claim it prepared (status.devices[].networkData): the
	// interface a container gets, its addresses and hardware address.
	NetworkData *resourceapi.NetworkDeviceData
	// Hooks are OCI hooks the container runtime runs for a container
	// given the device (CDI's containerEdits.hooks), e.g. a createRuntime
	// hook that puts a network interface into the container's network
	// namespace.
	Hooks []Hook
	// Pool is the pool of a device the node does not own: a network-
	// attached device, which the driver's controller publishes in a pool
	// that several nodes reach (a slice nodeSelector, allNodes, or
	// per-device node selection), and which the plugin of each node it
	// reaches prepares. The plugin publishes none of these. Empty: the
	// node's own pool, named after the node, which the plugin publishes.
	Pool string
}

// PoolOf is the pool a device of the node's driver is in: its Pool, or the
// node's own.
func (d *Driver) poolOf(dev Device) string {
	if dev.Pool != "" {
		return dev.Pool
	}
	return d.opts.NodeName
}

// Hook is an OCI hook of a device's container edits: HookName is the OCI
// hook point (createRuntime, createContainer, startContainer, poststart,
// poststop), Path the host program, Args its argv (the program first).
type Hook struct {
	HookName string
	Path     string
	Args     []string
}

// DeviceNode is a host device file a container gets.
type DeviceNode struct {
	// Path is the file's path in the container.
	Path string
	// HostPath is the file on the host, Path if empty: a device driver
	// installed by a container may keep its device files elsewhere.
	HostPath string
}

// ContainerEdits are what a container gets besides its devices' own
// variables: environment variables and host device files.
type ContainerEdits struct {
	Env         map[string]string
	DeviceNodes []DeviceNode
}

func (e ContainerEdits) empty() bool { return len(e.Env) == 0 && len(e.DeviceNodes) == 0 }

// Inventory lists a node's devices.
type Inventory interface {
	// Devices returns the devices with stable names, in the order they are
	// published: the allocator takes the first device that fits.
	Devices(ctx context.Context) ([]Device, error)
}

// NodeWideInventory is an Inventory whose devices need container edits of
// the whole node rather than of one device, such as a GPU driver's control
// device files. The driver writes them once, as the CDI device
// <CDIKind>=node in a spec file of its own, and lists that device with
// every prepared device, so a container gets them once whatever its claims.
type NodeWideInventory interface {
	Inventory
	// NodeEdits returns the node-wide edits; empty ones are no CDI device.
	NodeEdits() ContainerEdits
}

// DevicePreparer is an Inventory whose devices need work on the node before
// a container can use them, undone when the claim is unprepared: a MIG
// device's GPU and compute instances exist only while a claim holds it.
// The driver checkpoints a claim as Preparing before it prepares any of its
// devices, so that what a driver stopped in the middle may have left is
// undone when it starts again, never leaked nor made twice.
type DevicePreparer interface {
	Inventory
	// PrepareDevice readies a device for a claim; a device that needs
	// nothing returns the zero DevicePrepared.
	PrepareDevice(ctx context.Context, device string) (DevicePrepared, error)
	// UnprepareDevice undoes PrepareDevice. state is what PrepareDevice
	// returned, or nil where it failed or may not have returned (the driver
	// stopped in the middle): then it undoes whatever the call may have
	// left. Undoing what is already gone is no error.
	UnprepareDevice(ctx context.Context, device string, state json.RawMessage) error
}

// DevicePrepared is what a DevicePreparer made of a device for a claim.
type DevicePrepared struct {
	// State is what UnprepareDevice needs; the checkpoint keeps it.
	State json.RawMessage
	// Env and ClaimEnv add to the device's Env and ClaimEnv.
	Env      map[string]string
	ClaimEnv map[string]string
	// StatusData adds to the device's StatusData.
	StatusData map[string]string
}
