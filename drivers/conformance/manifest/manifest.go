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
	"os"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

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

// ErrInvalid wraps every decoding and validation error of a manifest.
var ErrInvalid = errors.New("invalid driver manifest")

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
	// ProofPod is what the suite's pods need to run on the driver's nodes
	// beside their claims (tolerations, a node selector, pull secrets, a
	// runtime or priority class).
	ProofPod *ProofPod `json:"proofPod,omitempty"`
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

// ExtendedResource is the extended resource a pod asks for to get one of
// the driver's devices without a claim.
func (m *Manifest) ExtendedResource() string {
	if m.ExtendedResourceName != "" {
		return m.ExtendedResourceName
	}
	return "deviceclass.resource.kubernetes.io/" + m.DeviceClass
}
