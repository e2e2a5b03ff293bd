package manifest

import (
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dralab/dralab/drivers/conformance/devices"
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
	errs = append(errs, m.ProofPod.validate(field.NewPath("proofPod"))...)
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
	if err := devices.CompileDerived(m.Topology.Expression); err != nil {
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
	if _, err := devices.CompileSelectors(expr); err != nil {
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
