package manifest

import (
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dralab/dralab/drivers/conformance/nearest"
)

// Capability names a DRA feature the driver supports; the suite runs the
// tests of a feature only for a driver whose manifest enables it.
type Capability string

// Capabilities are named after the upstream Kubernetes feature gate where
// one exists, so that a manifest reads like the cluster's --feature-gates.
const (
	// DRAPrioritizedList: claims may ask for the driver's devices through a
	// prioritized list (firstAvailable) over the manifest's
	// prioritizedClasses, and the driver prepares results whose request is
	// "request/subrequest".
	DRAPrioritizedList Capability = "DRAPrioritizedList"
	// DRAAdminAccess: the driver prepares claims with adminAccess for
	// devices already allocated to other claims, for monitoring, without
	// disturbing the workload using them.
	DRAAdminAccess Capability = "DRAAdminAccess"
	// DRADeviceTaints: the driver's devices can be tainted, by the driver in
	// its ResourceSlices or by a DeviceTaintRule, and pods that do not
	// tolerate a taint neither get nor keep such a device.
	DRADeviceTaints Capability = "DRADeviceTaints"
	// DRAExtendedResource: the driver's DeviceClass advertises
	// extendedResourceName, so a pod asking for that extended resource in
	// its container resources gets a device through a claim the scheduler
	// creates, without writing a claim itself.
	DRAExtendedResource Capability = "DRAExtendedResource"
	// DRAPartitionableDevices: the driver publishes partitions that consume
	// shared counters of a physical device, and allocating one partition
	// makes the overlapping ones unavailable.
	DRAPartitionableDevices Capability = "DRAPartitionableDevices"
	// DRAConsumableCapacity: the driver's devices allow multiple allocations,
	// each claim consuming part of a device's capacity, and the driver
	// prepares several claims on one device.
	DRAConsumableCapacity Capability = "DRAConsumableCapacity"
	// DRADeviceBindingConditions: the driver's devices (the manifest's
	// bindingConditions) carry binding conditions, and a pod using one is
	// bound only once they are met in the claim's device status, set by
	// the driver's controller (in the embedded lab: its attach controller).
	DRADeviceBindingConditions Capability = "DRADeviceBindingConditions"
	// DRAResourceClaimDeviceStatus: the driver writes the status of the
	// devices it prepared (conditions, data, network data) into the claim.
	DRAResourceClaimDeviceStatus Capability = "DRAResourceClaimDeviceStatus"
	// ResourceHealthStatus: the driver reports its devices' health to the
	// kubelet, which shows a failed device in the status of the pods that
	// hold it; the manifest's health commands fail and heal a device.
	ResourceHealthStatus Capability = "ResourceHealthStatus"
	// SharedClaims: one claim used by several pods is prepared for each of
	// them and gives every pod the same device.
	SharedClaims Capability = "SharedClaims"
	// OpaqueConfig: the driver accepts opaque configuration addressed to it
	// in a DeviceClass or claim, and fails preparation with a clear error
	// for configuration it cannot parse.
	OpaqueConfig Capability = "OpaqueConfig"
	// DRAWorkloadResourceClaims: a claim that a PodGroup makes for its
	// pods (spec.resourceClaims, scheduling.k8s.io/v1beta1) is prepared
	// for every pod of the group that refers to it, each proving the
	// group claim's device. The cluster must serve PodGroups (gates
	// GenericWorkload and DRAWorkloadResourceClaims, both off by default
	// in Kubernetes 1.37).
	DRAWorkloadResourceClaims Capability = "DRAWorkloadResourceClaims"
	// NetworkData: the driver writes each network device it prepared into
	// the claim's status.devices with its network data (interface name,
	// addresses, hardware address), and the container sees the interface
	// that data names (the manifest's networkData proof).
	NetworkData Capability = "NetworkData"
	// DRADerivedAttributes: the manifest's topology expression, computed
	// by a request as a derived attribute, aligns the driver's devices: a
	// matchAttribute constraint on it gives devices of one value, and a
	// claim whose requests must take different values waits. The cluster
	// must have the DRADerivedAttributes gate on (alpha in Kubernetes 1.37).
	DRADerivedAttributes Capability = "DRADerivedAttributes"
	// DRAListTypeAttributes: the driver publishes the manifest's
	// listAttribute as a list on a device of several values (a NIC on two
	// NUMA nodes), and matchAttribute treats it as a set: the device
	// matches a device of each of its values, distinctAttribute keeps it
	// from one that shares a value. The cluster must have the
	// DRAListTypeAttributes gate on (alpha in Kubernetes 1.37).
	DRAListTypeAttributes Capability = "DRAListTypeAttributes"
	// DRAOptionalNodeOperations: the driver publishes devices that need no
	// work on the node (ResourceSlice spec.skipNodeOperations); the
	// scheduler copies that into the allocation, and a pod using such a
	// device runs without the driver preparing it. The cluster must have
	// the DRAOptionalNodeOperations gate on (alpha in Kubernetes 1.37).
	DRAOptionalNodeOperations Capability = "DRAOptionalNodeOperations"
	// DeviceMetadata: the driver gives each container of a claim a device
	// metadata file per request (the kubelet plugin helper's
	// EnableDeviceMetadata, beta in Kubernetes 1.37, no gate), mounted at
	// /var/run/kubernetes.io/dra-device-attributes/…/<driver>-metadata.json:
	// it names the claim and exactly the devices allocated to the request,
	// each with the attributes its ResourceSlice publishes.
	DeviceMetadata Capability = "DeviceMetadata"
	// DRANodeAllocatableResources: the driver's devices declare what they
	// cost the node (nodeAllocatableResources: a mapping to its CPUs or
	// memory, or an overhead such as a GPU's host memory), a pod's status
	// accounts exactly what its device declares, and the scheduler keeps
	// a pod off a node whose free resources its containers fit but not
	// with its device's share. The cluster must have the
	// DRANodeAllocatableResources gate on (alpha in Kubernetes 1.37), and a
	// node whose free devices of the class all declare some.
	DRANodeAllocatableResources Capability = "DRANodeAllocatableResources"
	// KubeletPodResourcesDynamicResources: the kubelet lists each
	// container's DRA devices on its podresources API (GA), as the driver
	// prepared them: the claim, the allocated device, its CDI device IDs.
	// The suite reads a node's socket where it can reach the node (the
	// embedded lab).
	KubeletPodResourcesDynamicResources Capability = "KubeletPodResourcesDynamicResources"
)

// knownCapabilities lists every capability, in the order of the constants.
var knownCapabilities = []Capability{
	DRAPrioritizedList,
	DRAAdminAccess,
	DRADeviceTaints,
	DRAExtendedResource,
	DRAPartitionableDevices,
	DRAConsumableCapacity,
	DRADeviceBindingConditions,
	DRAResourceClaimDeviceStatus,
	ResourceHealthStatus,
	SharedClaims,
	OpaqueConfig,
	DRAWorkloadResourceClaims,
	NetworkData,
	DRADerivedAttributes,
	DRAListTypeAttributes,
	DRAOptionalNodeOperations,
	DeviceMetadata,
	DRANodeAllocatableResources,
	KubeletPodResourcesDynamicResources,
}

// Capabilities returns every capability a manifest may name.
func Capabilities() []Capability {
	return slices.Clone(knownCapabilities)
}

// Enabled reports whether the manifest says the driver supports c.
func (m *Manifest) Enabled(c Capability) bool {
	return m.Capabilities[c]
}

func validateCapabilities(p *field.Path, caps map[Capability]bool) field.ErrorList {
	var unknown []string
	for c := range caps {
		if !slices.Contains(knownCapabilities, c) {
			unknown = append(unknown, string(c))
		}
	}
	sort.Strings(unknown) // map order would make the message change from run to run
	var known []string
	for _, c := range knownCapabilities {
		known = append(known, string(c))
	}
	var errs field.ErrorList
	for _, name := range unknown {
		detail := "unknown capability; "
		if s := nearest.Name(name, known); s != "" {
			detail += "did you mean " + s + "? "
		}
		detail += "known: " + strings.Join(known, ", ")
		// The name is already the last element of the path: omit it as
		// the value, so the message does not repeat it.
		errs = append(errs, &field.Error{Type: field.ErrorTypeNotSupported, Field: p.Child(name).String(), BadValue: field.OmitValueType{}, Detail: detail})
	}
	return errs
}
