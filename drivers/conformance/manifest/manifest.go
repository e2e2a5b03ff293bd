// Package manifest defines a DRA driver's capability manifest, driver.yaml:
// what the conformance suite may expect of the driver under test. It plays
// the part of csi-test's test-driver.yaml with one difference: the file is
// versioned and decoded strictly, so a misspelt capability is an error
// naming the file and the field, never a test silently skipped.
package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dralab/dralab/drivers/conformance/devicecel"
	"github.com/dralab/dralab/drivers/conformance/devices"
	"github.com/dralab/dralab/drivers/conformance/nearest"
	"github.com/dralab/dralab/drivers/conformance/strictyaml"
)

// Manifest file identity.
const (
	APIVersion = "conformance.dralab.dev/v1alpha1"
	Kind       = "DriverManifest"
)

// Defaults of the timeouts a manifest leaves out.
const (
	DefaultPodRunningTimeout = 2 * time.Minute
	DefaultPrepareTimeout    = 30 * time.Second
)

// Limits Kubernetes puts on what a manifest names; checking them here
// reports a bad manifest before the suite creates anything.
const (
	// maxDriverNameLength is resource.k8s.io's DriverNameMaxLength: a driver
	// name is a DNS subdomain but also a label value in places.
	maxDriverNameLength = 63
	// minPrioritizedClasses: a prioritized list of one class is a plain
	// request and would test nothing.
	minPrioritizedClasses = 2
	// maxPrioritizedClasses is resource.k8s.io's
	// FirstAvailableDeviceRequestMaxSize: a request's firstAvailable list
	// holds at most 8 subrequests.
	maxPrioritizedClasses = 8
)

// ErrInvalid wraps every decoding and validation error of a manifest.
var ErrInvalid = errors.New("invalid driver manifest")

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

// Manifest is a validated driver.yaml with its defaults applied.
type Manifest struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Driver is the DRA driver's name, a DNS subdomain such as
	// gpu.example.com.
	Driver string `json:"driver"`
	// DeviceClass selects one device of the driver.
	DeviceClass string `json:"deviceClass"`
	// PrioritizedClasses are the classes of the prioritized-list tests,
	// most preferred first.
	PrioritizedClasses []string `json:"prioritizedClasses,omitempty"`
	// Capabilities says which features the driver supports; a capability
	// not named is not supported.
	Capabilities map[Capability]bool `json:"capabilities,omitempty"`
	// ExtendedResourceName is the extended resource the driver's
	// DeviceClass advertises (spec.extendedResourceName); empty: the name
	// every class has implicitly, deviceclass.resource.kubernetes.io/<class>.
	ExtendedResourceName string `json:"extendedResourceName,omitempty"`
	// OpaqueConfig are the opaque parameters of the opaque-config check,
	// required with OpaqueConfig.
	OpaqueConfig *OpaqueConfigSample `json:"opaqueConfig,omitempty"`
	// Partitions says which devices are partitions, required with
	// DRAPartitionableDevices.
	Partitions *Partitions `json:"partitions,omitempty"`
	// Shares says which devices are shared and what each claim asks of
	// one, required with DRAConsumableCapacity.
	Shares *Shares `json:"shares,omitempty"`
	// BindingConditions says which devices carry binding conditions,
	// required with DRADeviceBindingConditions.
	BindingConditions *BindingConditions `json:"bindingConditions,omitempty"`
	// Health says how to fail and heal a device, required with
	// ResourceHealthStatus.
	Health *HealthCommands `json:"health,omitempty"`
	// NetworkData says how a container shows the interface of its network
	// device, required with NetworkData.
	NetworkData *NetworkDataProof `json:"networkData,omitempty"`
	// Topology says where a device sits, required with
	// DRADerivedAttributes.
	Topology *Topology `json:"topology,omitempty"`
	// ListAttribute is the attribute the driver publishes as a list,
	// required with DRAListTypeAttributes.
	ListAttribute *ListAttribute `json:"listAttribute,omitempty"`
	// Proof is how a container shows that it got its device.
	Proof Proof `json:"proof"`
	// Timeouts bound how long the suite waits.
	Timeouts Timeouts `json:"timeouts"`
	// Sanity tunes the sanity layer, which calls the driver's kubelet
	// plugin directly.
	Sanity Sanity `json:"sanity"`
}

// OpaqueConfigSample is configuration the driver takes (Valid) and one it
// must refuse (Invalid), each the parameters of an opaque configuration
// addressed to the driver.
type OpaqueConfigSample struct {
	Valid   json.RawMessage `json:"valid"`
	Invalid json.RawMessage `json:"invalid"`
}

// Partitions are the devices of the partitionable-devices check: those
// DeviceClass selects (narrowed by Selector), each consuming counters of a
// shared counter set. The check allocates them, on one node, until the
// counters allow no more.
type Partitions struct {
	DeviceClass string `json:"deviceClass"`
	// Selector is a CEL expression over a device narrowing the class to
	// partitions of one size (e.g. one MIG profile); empty: the class.
	Selector string `json:"selector,omitempty"`
	// Proof is how a container shows its partition; empty: the manifest's
	// proof.
	Proof *Proof `json:"proof,omitempty"`
}

// Shares are the devices of the consumable-capacity check: those
// DeviceClass selects (narrowed by Selector) that allow multiple
// allocations. Two claims, each asking Request of one device's capacity,
// must share it.
type Shares struct {
	DeviceClass string `json:"deviceClass"`
	Selector    string `json:"selector,omitempty"`
	// Request is each claim's capacity.requests, e.g. {memory: 7Gi}.
	Request map[resourceapi.QualifiedName]resource.Quantity `json:"request"`
}

// NetworkDataProof is how a container shows the network interface of the
// device it was given: Interface proves the interface's name, which must
// be the interfaceName of the device's network data in the claim's status.
type NetworkDataProof struct {
	Interface Proof `json:"interface"`
}

// Topology is where a device of the driver sits, for the checks that align
// devices by it: Expression, a CEL expression over a device (as a derived
// attribute's), gives a value devices that sit together share, e.g.
// device.attributes["resource.kubernetes.io"].numaNode.
type Topology struct {
	Expression string `json:"expression"`
}

// ListAttribute names the attribute the driver publishes as a list
// (ints, strings, bools or versions) on some of its devices, e.g.
// resource.kubernetes.io/numaNode, a domain-qualified name or one of the
// driver's own. The check discovers which devices carry several values.
type ListAttribute struct {
	Name resourceapi.FullyQualifiedName `json:"name"`
}

// HealthCommands fail and heal a device for the health check: commands run
// by the suite's process, each an argv with {node}, {pool} and {device}
// replaced by the device's. Fail must make the driver report the device
// unhealthy; Heal undoes it, and runs whatever the check found.
type HealthCommands struct {
	Fail []string `json:"fail"`
	Heal []string `json:"heal"`
}

// BindingConditions are the devices of the binding-conditions check: those
// DeviceClass selects (narrowed by Selector) that publish binding
// conditions. Something besides the scheduler (the driver's controller)
// must set the conditions once a claim is allocated such a device.
type BindingConditions struct {
	DeviceClass string `json:"deviceClass"`
	Selector    string `json:"selector,omitempty"`
}

// Proof is how a container shows that it got its device: exactly one of
// Env and Command is set.
type Proof struct {
	Env     *EnvProof     `json:"env,omitempty"`
	Command *CommandProof `json:"command,omitempty"`
	// Names is what the proven value must be for the device the claim
	// was allocated, a template of {driver}, {pool}, {device} and
	// {attribute:<name>} (the device's attribute, e.g. {attribute:uuid}):
	// "{device}" for a driver that sets GPU_DEVICE_0=gpu-3 for gpu-3.
	// Empty: the value must only match the pattern. Either way the suite
	// requires distinct devices to prove distinct values and one device
	// the same value wherever it is proven.
	Names string `json:"names,omitempty"`
}

// placeholder finds a template's placeholders.
var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// Expected is the value Names gives for a device of driver's pool: what a
// container given that device must prove. It fails on a placeholder whose
// attribute the device lacks.
func (p Proof) Expected(driver, pool string, dev resourceapi.Device) (string, error) {
	var errs []error
	out := placeholder.ReplaceAllStringFunc(p.Names, func(ph string) string {
		switch ph {
		case "{driver}":
			return driver
		case "{pool}":
			return pool
		case "{device}":
			return dev.Name
		}
		name, ok := strings.CutPrefix(strings.Trim(ph, "{}"), "attribute:")
		if !ok {
			errs = append(errs, fmt.Errorf("unknown placeholder %s", ph))
			return ph
		}
		v, ok := devices.Attribute(driver, dev.Attributes, name)
		if !ok {
			errs = append(errs, fmt.Errorf("device %s/%s/%s has no attribute %s", driver, pool, dev.Name, name))
		}
		return v
	})
	return out, errors.Join(errs...)
}

// EnvProof: the driver sets an environment variable in the container
// (through CDI) to a value that Pattern matches. The variable is named by
// exactly one of Name and NamePattern.
type EnvProof struct {
	// Name is the variable, e.g. GPU_DEVICE_0.
	Name string `json:"name,omitempty"`
	// NamePattern is a Go regular expression over variable names, for a
	// driver that names the variable after the device (GPU_DEVICE_3=gpu-3
	// for gpu-3): a fixed name would prove only while that one device is
	// free. The proof holds when any variable of the container whose
	// name it matches has a value Pattern matches. Anchor it to match
	// whole names.
	NamePattern string `json:"namePattern,omitempty"`
	// Pattern is a Go regular expression; anchor it to match the whole
	// value.
	Pattern string `json:"pattern"`
}

// CommandProof: Args, run in the container, print output that Pattern
// matches, e.g. nvidia-smi -L listing the device.
type CommandProof struct {
	Args []string `json:"args"`
	// Pattern is a Go regular expression matched against the command's
	// output.
	Pattern string `json:"pattern"`
}

// Timeouts bound how long the suite waits for the driver.
type Timeouts struct {
	// PodRunning is how long a pod using the driver's devices may take to
	// run: scheduling, preparation and container start.
	PodRunning time.Duration `json:"podRunning"`
	// Prepare is how long one NodePrepareResources call may take.
	Prepare time.Duration `json:"prepare"`
}

// MarshalJSON writes durations the way the file spells them ("2m0s"), so
// that a marshalled Manifest parses back to itself.
func (t Timeouts) MarshalJSON() ([]byte, error) {
	return json.Marshal(timeoutsFile{PodRunning: t.PodRunning.String(), Prepare: t.Prepare.String()})
}

// Sanity tunes the sanity layer.
type Sanity struct {
	// Restartable: the sanity layer may restart the driver between
	// preparing and unpreparing a claim, to check that the driver's
	// checkpoint survives a restart.
	Restartable bool `json:"restartable"`
}

// Enabled reports whether the manifest says the driver supports c.
func (m *Manifest) Enabled(c Capability) bool {
	return m.Capabilities[c]
}

// document is a driver.yaml as written. Durations stay strings and optional
// booleans pointers until validation, so that a bad duration is reported
// with its field among all other errors, and a default is told apart from
// an explicit false.
type document struct {
	Manifest
	Timeouts *timeoutsFile `json:"timeouts,omitempty"`
	Sanity   *sanityFile   `json:"sanity,omitempty"`
}

type timeoutsFile struct {
	PodRunning string `json:"podRunning,omitempty"`
	Prepare    string `json:"prepare,omitempty"`
}

type sanityFile struct {
	Restartable *bool `json:"restartable,omitempty"`
}

// Load reads and validates a manifest file.
func Load(file string) (*Manifest, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading driver manifest: %w", err)
	}
	return Parse(file, data)
}

// Parse decodes a manifest strictly, applies defaults and validates it;
// source names the file in errors. Every validation error is reported, not
// only the first.
func Parse(source string, data []byte) (*Manifest, error) {
	wrap := func(err error) error { return fmt.Errorf("%w %s: %w", ErrInvalid, source, err) }
	var f document
	if err := strictyaml.Decode(data, &f); err != nil {
		return nil, wrap(err)
	}
	m, errs := f.complete()
	if len(errs) > 0 {
		return nil, wrap(errs.ToAggregate())
	}
	return m, nil
}

// complete turns the document into a Manifest with defaults applied and
// returns every error found on the way.
func (f *document) complete() (*Manifest, field.ErrorList) {
	m := f.Manifest
	errs := m.validate()

	timeouts := timeoutsFile{}
	if f.Timeouts != nil {
		timeouts = *f.Timeouts
	}
	tp := field.NewPath("timeouts")
	var err *field.Error
	m.Timeouts.PodRunning, err = parseDuration(tp.Child("podRunning"), timeouts.PodRunning, DefaultPodRunningTimeout)
	if err != nil {
		errs = append(errs, err)
	}
	m.Timeouts.Prepare, err = parseDuration(tp.Child("prepare"), timeouts.Prepare, DefaultPrepareTimeout)
	if err != nil {
		errs = append(errs, err)
	}

	m.Sanity.Restartable = true
	if f.Sanity != nil && f.Sanity.Restartable != nil {
		m.Sanity.Restartable = *f.Sanity.Restartable
	}
	return &m, errs
}

func parseDuration(p *field.Path, s string, def time.Duration) (time.Duration, *field.Error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, field.Invalid(p, s, `must be a Go duration such as "90s" or "2m"`)
	}
	if d <= 0 {
		return 0, field.Invalid(p, s, "must be positive")
	}
	return d, nil
}

func (m *Manifest) validate() field.ErrorList {
	var errs field.ErrorList
	if m.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), m.APIVersion, []string{APIVersion}))
	}
	if m.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), m.Kind, []string{Kind}))
	}

	dp := field.NewPath("driver")
	switch {
	case m.Driver == "":
		errs = append(errs, field.Required(dp, "the DRA driver's name, e.g. gpu.example.com"))
	case len(m.Driver) > maxDriverNameLength:
		errs = append(errs, field.TooLong(dp, m.Driver, maxDriverNameLength))
	default:
		for _, msg := range validation.IsDNS1123Subdomain(m.Driver) {
			errs = append(errs, field.Invalid(dp, m.Driver, msg))
		}
		if !strings.Contains(m.Driver, ".") {
			errs = append(errs, field.Invalid(dp, m.Driver, "must be a domain name with a dot, e.g. gpu.example.com, so that it cannot clash with another vendor's driver"))
		}
	}

	errs = append(errs, validateClassName(field.NewPath("deviceClass"), m.DeviceClass)...)

	pp := field.NewPath("prioritizedClasses")
	switch n := len(m.PrioritizedClasses); {
	case n == 0 && m.Enabled(DRAPrioritizedList):
		errs = append(errs, field.Required(pp, fmt.Sprintf("%s is enabled: list at least %d classes, most preferred first", DRAPrioritizedList, minPrioritizedClasses)))
	case n > 0 && n < minPrioritizedClasses:
		errs = append(errs, field.TooFew(pp, n, minPrioritizedClasses))
	case n > maxPrioritizedClasses:
		errs = append(errs, field.TooMany(pp, n, maxPrioritizedClasses))
	}
	seen := sets.New[string]()
	for i, class := range m.PrioritizedClasses {
		errs = append(errs, validateClassName(pp.Index(i), class)...)
		if seen.Has(class) {
			errs = append(errs, field.Duplicate(pp.Index(i), class))
		}
		seen.Insert(class)
	}

	errs = append(errs, validateCapabilities(field.NewPath("capabilities"), m.Capabilities)...)

	if m.ExtendedResourceName != "" {
		errs = append(errs, validateExtendedResourceName(field.NewPath("extendedResourceName"), m.ExtendedResourceName)...)
	}

	op := field.NewPath("opaqueConfig")
	switch {
	case m.OpaqueConfig == nil && m.Enabled(OpaqueConfig):
		errs = append(errs, field.Required(op, fmt.Sprintf("%s is enabled: give valid and invalid parameters for the driver", OpaqueConfig)))
	case m.OpaqueConfig != nil:
		for _, p := range []struct {
			name string
			raw  json.RawMessage
		}{{"valid", m.OpaqueConfig.Valid}, {"invalid", m.OpaqueConfig.Invalid}} {
			if len(p.raw) == 0 || p.raw[0] != '{' {
				errs = append(errs, field.Required(op.Child(p.name), "an object: the parameters of an opaque configuration for the driver"))
			}
		}
	}

	errs = append(errs, m.Proof.validate(field.NewPath("proof"))...)
	errs = append(errs, m.validatePartitions(field.NewPath("partitions"))...)
	errs = append(errs, m.validateShares(field.NewPath("shares"))...)
	errs = append(errs, m.validateBindingConditions(field.NewPath("bindingConditions"))...)
	errs = append(errs, m.validateHealth(field.NewPath("health"))...)
	errs = append(errs, m.validateNetworkData(field.NewPath("networkData"))...)
	errs = append(errs, m.validateTopology(field.NewPath("topology"))...)
	errs = append(errs, m.validateListAttribute(field.NewPath("listAttribute"))...)
	return errs
}

func (m *Manifest) validateNetworkData(p *field.Path) field.ErrorList {
	if m.NetworkData == nil {
		if m.Enabled(NetworkData) {
			return field.ErrorList{field.Required(p, fmt.Sprintf("%s is enabled: give the interface proof, how a container shows its interface's name (e.g. env: {name: NIC_INTERFACE_0, pattern: '^[a-z0-9]+$'})", NetworkData))}
		}
		return nil
	}
	ip := p.Child("interface")
	errs := m.NetworkData.Interface.validate(ip)
	if m.NetworkData.Interface.Names != "" {
		errs = append(errs, field.Forbidden(ip.Child("names"), "the interface's name must be the one in the claim's network data: names does not apply"))
	}
	// The check reads the proof container's printed environment.
	if m.NetworkData.Interface.Command != nil {
		errs = append(errs, field.Forbidden(ip.Child("command"), "the proof container prints its environment: show the interface with env"))
	}
	if m.Proof.Command != nil {
		errs = append(errs, field.Forbidden(ip, "the interface is read from the environment the proof container prints, which a command proof replaces: prove the device with env"))
	}
	return errs
}

func (m *Manifest) validateTopology(p *field.Path) field.ErrorList {
	if m.Topology == nil {
		if m.Enabled(DRADerivedAttributes) {
			return field.ErrorList{field.Required(p, fmt.Sprintf("%s is enabled: give the topology expression, a CEL expression over a device that devices sitting together share (e.g. device.attributes[\"resource.kubernetes.io\"].numaNode)", DRADerivedAttributes))}
		}
		return nil
	}
	ep := p.Child("expression")
	if m.Topology.Expression == "" {
		return field.ErrorList{field.Required(ep, "a CEL expression over a device, e.g. device.attributes[\"resource.kubernetes.io\"].numaNode")}
	}
	if err := devicecel.CompileDerived(m.Topology.Expression); err != nil {
		return field.ErrorList{field.Invalid(ep, m.Topology.Expression, err.Error())}
	}
	return nil
}

func (m *Manifest) validateListAttribute(p *field.Path) field.ErrorList {
	if m.ListAttribute == nil {
		if m.Enabled(DRAListTypeAttributes) {
			return field.ErrorList{field.Required(p, fmt.Sprintf("%s is enabled: give the name of the attribute the driver publishes as a list (e.g. resource.kubernetes.io/numaNode)", DRAListTypeAttributes))}
		}
		return nil
	}
	np := p.Child("name")
	name := string(m.ListAttribute.Name)
	if name == "" {
		return field.ErrorList{field.Required(np, "an attribute name, e.g. resource.kubernetes.io/numaNode")}
	}
	domain, id, qualified := strings.Cut(name, "/")
	var errs field.ErrorList
	if qualified {
		for _, msg := range validation.IsDNS1123Subdomain(domain) {
			errs = append(errs, field.Invalid(np, name, msg))
		}
	} else {
		id = domain
	}
	if !cIdentifier.MatchString(id) || len(id) > maxAttributeNameLength {
		errs = append(errs, field.Invalid(np, name, fmt.Sprintf("the name after the domain must be a C identifier of at most %d characters", maxAttributeNameLength)))
	}
	return errs
}

// cIdentifier and maxAttributeNameLength are resource.k8s.io's rules for
// an attribute's name after its domain.
var cIdentifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

const maxAttributeNameLength = 32

func (m *Manifest) validateHealth(p *field.Path) field.ErrorList {
	if m.Health == nil {
		if m.Enabled(ResourceHealthStatus) {
			return field.ErrorList{field.Required(p, fmt.Sprintf("%s is enabled: give the fail and heal commands of a device", ResourceHealthStatus))}
		}
		return nil
	}
	var errs field.ErrorList
	for _, c := range []struct {
		name string
		argv []string
	}{{"fail", m.Health.Fail}, {"heal", m.Health.Heal}} {
		name, argv := c.name, c.argv
		switch {
		case len(argv) == 0 || argv[0] == "":
			errs = append(errs, field.Required(p.Child(name), "a command, e.g. [dralab, gpu, "+name+", \"{node}/{device}\"]"))
		case !slices.ContainsFunc(argv, func(a string) bool { return strings.Contains(a, "{device}") }):
			errs = append(errs, field.Invalid(p.Child(name), argv, "the command must name the device: {device} (and {node} or {pool}) are replaced by the device's"))
		}
	}
	return errs
}

func (m *Manifest) validateBindingConditions(p *field.Path) field.ErrorList {
	if m.BindingConditions == nil {
		if m.Enabled(DRADeviceBindingConditions) {
			return field.ErrorList{field.Required(p, fmt.Sprintf("%s is enabled: give the deviceClass (and selector) of the devices with binding conditions", DRADeviceBindingConditions))}
		}
		return nil
	}
	errs := validateClassName(p.Child("deviceClass"), m.BindingConditions.DeviceClass)
	return append(errs, validateSelector(p.Child("selector"), m.BindingConditions.Selector)...)
}

func (m *Manifest) validatePartitions(p *field.Path) field.ErrorList {
	if m.Partitions == nil {
		if m.Enabled(DRAPartitionableDevices) {
			return field.ErrorList{field.Required(p, fmt.Sprintf("%s is enabled: give the deviceClass (and selector) of the partitions", DRAPartitionableDevices))}
		}
		return nil
	}
	errs := validateClassName(p.Child("deviceClass"), m.Partitions.DeviceClass)
	errs = append(errs, validateSelector(p.Child("selector"), m.Partitions.Selector)...)
	if m.Partitions.Proof != nil {
		errs = append(errs, m.Partitions.Proof.validate(p.Child("proof"))...)
	}
	return errs
}

func (m *Manifest) validateShares(p *field.Path) field.ErrorList {
	if m.Shares == nil {
		if m.Enabled(DRAConsumableCapacity) {
			return field.ErrorList{field.Required(p, fmt.Sprintf("%s is enabled: give the deviceClass and the capacity request of the shares", DRAConsumableCapacity))}
		}
		return nil
	}
	errs := validateClassName(p.Child("deviceClass"), m.Shares.DeviceClass)
	errs = append(errs, validateSelector(p.Child("selector"), m.Shares.Selector)...)
	rp := p.Child("request")
	if len(m.Shares.Request) == 0 {
		errs = append(errs, field.Required(rp, "the capacity each claim asks of a shared device, e.g. {memory: 8Gi}"))
	}
	for _, name := range slices.Sorted(maps.Keys(m.Shares.Request)) {
		for _, msg := range validation.IsQualifiedName(string(name)) {
			errs = append(errs, field.Invalid(rp.Key(string(name)), string(name), msg))
		}
		if q := m.Shares.Request[name]; q.Sign() <= 0 {
			errs = append(errs, field.Invalid(rp.Key(string(name)), q.String(), "must be positive"))
		}
	}
	return errs
}

// validateSelector compiles a CEL device selector with the allocator's
// library, so that a typo is reported before the suite runs.
func validateSelector(p *field.Path, expr string) field.ErrorList {
	if expr == "" {
		return nil
	}
	if _, err := devicecel.Compile(expr); err != nil {
		return field.ErrorList{field.Invalid(p, expr, err.Error())}
	}
	return nil
}

func validateClassName(p *field.Path, name string) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(p, "a DeviceClass name")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
}

// validateExtendedResourceName applies the API server's rule for extended
// resources: domain-prefixed, outside kubernetes.io, and usable in a quota
// as requests.<name>.
func validateExtendedResourceName(p *field.Path, name string) field.ErrorList {
	var errs field.ErrorList
	domain, _, prefixed := strings.Cut(name, "/")
	if !prefixed {
		errs = append(errs, field.Invalid(p, name, "must be prefixed with a domain, e.g. example.com/gpu"))
	} else if domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") {
		errs = append(errs, field.Invalid(p, name, "the kubernetes.io domain is reserved for native resources"))
	}
	for _, msg := range validation.IsQualifiedName("requests." + name) {
		errs = append(errs, field.Invalid(p, name, msg))
	}
	return errs
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

func (pr *Proof) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case pr.Env == nil && pr.Command == nil:
		return field.ErrorList{field.Required(p, "set exactly one of env and command: how a container shows it got its device")}
	case pr.Env != nil && pr.Command != nil:
		errs = append(errs, field.Forbidden(p, "set exactly one of env and command, not both"))
	}
	if e := pr.Env; e != nil {
		ep := p.Child("env")
		switch {
		case e.Name == "" && e.NamePattern == "":
			errs = append(errs, field.Required(ep.Child("name"), "set exactly one of name, the environment variable the driver sets (e.g. GPU_DEVICE_0), and namePattern, a regular expression over variable names (e.g. ^GPU_DEVICE_[0-9]+$)"))
		case e.Name != "" && e.NamePattern != "":
			errs = append(errs, field.Forbidden(ep, "set exactly one of name and namePattern, not both"))
		case e.Name != "":
			for _, msg := range validation.IsEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(ep.Child("name"), e.Name, msg))
			}
		default:
			if _, err := regexp.Compile(e.NamePattern); err != nil {
				errs = append(errs, field.Invalid(ep.Child("namePattern"), e.NamePattern, err.Error()))
			}
		}
		errs = append(errs, validatePattern(ep.Child("pattern"), e.Pattern)...)
	}
	if pr.Names != "" {
		phs := placeholder.FindAllString(pr.Names, -1)
		if len(phs) == 0 {
			errs = append(errs, field.Invalid(p.Child("names"), pr.Names, "name the device with {device}, {pool}, {driver} or {attribute:<name>}: a fixed value would be the same for every device"))
		}
		for _, ph := range phs {
			name, attr := strings.CutPrefix(strings.Trim(ph, "{}"), "attribute:")
			if !slices.Contains([]string{"{driver}", "{pool}", "{device}"}, ph) && (!attr || name == "") {
				errs = append(errs, field.NotSupported(p.Child("names"), ph, []string{"{driver}", "{pool}", "{device}", "{attribute:<name>}"}))
			}
		}
	}
	if c := pr.Command; c != nil {
		cp := p.Child("command")
		if len(c.Args) == 0 {
			errs = append(errs, field.Required(cp.Child("args"), "the command to run in the container, e.g. [nvidia-smi, -L]"))
		}
		errs = append(errs, validatePattern(cp.Child("pattern"), c.Pattern)...)
	}
	return errs
}

// validatePattern requires a pattern because an empty one matches
// anything, which would make the proof prove nothing.
func validatePattern(p *field.Path, pattern string) field.ErrorList {
	if pattern == "" {
		return field.ErrorList{field.Required(p, "a Go regular expression the value must match")}
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return field.ErrorList{field.Invalid(p, pattern, err.Error())}
	}
	return nil
}

// ExtendedResource is the extended resource a pod asks for to get one of
// the driver's devices without a claim.
func (m *Manifest) ExtendedResource() string {
	if m.ExtendedResourceName != "" {
		return m.ExtendedResourceName
	}
	return "deviceclass.resource.kubernetes.io/" + m.DeviceClass
}

// Match finds the proof in a container's output (its log): the env
// variable's value (the container prints its environment) or the match of
// the command's pattern. It returns the proven value.
func (p Proof) Match(output string) (string, error) {
	switch {
	case p.Env != nil:
		return p.Env.match(output)
	case p.Command != nil:
		re, err := regexp.Compile(p.Command.Pattern)
		if err != nil {
			return "", err
		}
		if m := re.FindString(output); m != "" {
			return m, nil
		}
		return "", fmt.Errorf("the output of %v does not match %q", p.Command.Args, p.Command.Pattern)
	}
	return "", fmt.Errorf("the manifest names no proof")
}

// match finds the variable in a printed environment, one NAME=value a
// line: the first whose value matches, of the variables NamePattern
// matches, or the variable Name.
func (e *EnvProof) match(output string) (string, error) {
	re, err := regexp.Compile(e.Pattern)
	if err != nil {
		return "", err
	}
	named := func(name string) bool { return name == e.Name }
	if e.NamePattern != "" {
		nameRE, err := regexp.Compile(e.NamePattern)
		if err != nil {
			return "", err
		}
		named = nameRE.MatchString
	}
	var seen []string
	for _, line := range strings.Split(output, "\n") {
		name, v, ok := strings.Cut(strings.TrimRight(line, "\r"), "=")
		if !ok || !named(name) {
			continue
		}
		if re.MatchString(v) {
			return v, nil
		}
		seen = append(seen, fmt.Sprintf("%s=%q", name, v))
	}
	switch {
	case len(seen) > 0 && e.NamePattern == "":
		return "", fmt.Errorf("%s does not match %q", seen[0], e.Pattern)
	case len(seen) > 0:
		return "", fmt.Errorf("of the variables whose name matches %q, none has a value matching %q: %s", e.NamePattern, e.Pattern, strings.Join(seen, ", "))
	case e.NamePattern != "":
		return "", fmt.Errorf("the container's environment has no variable whose name matches %q", e.NamePattern)
	}
	return "", fmt.Errorf("the container's environment has no %s", e.Name)
}
