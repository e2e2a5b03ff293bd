package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dralab/dralab/drivers/conformance/nearest"
)

// KubernetesVersion is the release whose feature gates and API versions a
// configuration is checked against (zz_generated_kubernetes.go, which
// internal/controlplane's TestKnownGatesAreKubernetes compares with the
// registry the control plane itself uses).
const KubernetesVersion = "v1.37.2"

// featureGate is what the lab knows of one Kubernetes feature gate.
type featureGate struct {
	// def is its default; stage "alpha", "beta", "GA" or "deprecated".
	def   bool
	stage string
	// locked: it cannot be set to anything but its default.
	locked bool
	// needs are the gates it cannot be enabled without.
	needs []string
}

// runtimeConfigGroups are the keys --runtime-config takes beside API
// versions (those are in kubeAPIVersions).
var runtimeConfigGroups = []string{"api/all", "api/ga", "api/beta", "api/alpha"}

// validateFeatureGates checks featureGates and runtimeConfig against what
// Kubernetes knows, so that a misspelt gate is refused before anything
// starts instead of failing the API server.
func (c *Config) validateFeatureGates() field.ErrorList {
	var errs field.ErrorList
	p := field.NewPath("featureGates")
	names := slices.Sorted(maps.Keys(c.FeatureGates))
	for _, name := range names {
		on := c.FeatureGates[name]
		g, ok := kubeFeatureGates[name]
		if !ok {
			errs = append(errs, field.Invalid(p.Key(name), name, "Kubernetes "+KubernetesVersion+" has no such feature gate"+didYouMean(name, slices.Collect(maps.Keys(kubeFeatureGates)))))
			continue
		}
		if g.locked && on != g.def {
			errs = append(errs, field.Invalid(p.Key(name), on, fmt.Sprintf("%s is %s and locked to %v in Kubernetes %s", name, g.stage, g.def, KubernetesVersion)))
		}
	}
	for _, name := range names {
		g, ok := kubeFeatureGates[name]
		if !ok || !c.FeatureGates[name] {
			continue
		}
		for _, dep := range g.needs {
			if !c.GateEnabled(dep) {
				errs = append(errs, field.Invalid(p.Key(name), true, fmt.Sprintf("needs %s, which is off (add %s: true)", dep, dep)))
			}
		}
	}
	p = field.NewPath("runtimeConfig")
	known := sets.New(kubeAPIVersions...)
	for _, key := range slices.Sorted(maps.Keys(c.RuntimeConfig)) {
		v := c.RuntimeConfig[key]
		if v != "true" && v != "false" {
			errs = append(errs, field.NotSupported(p.Key(key), v, []string{"true", "false"}))
		}
		if slices.Contains(runtimeConfigGroups, key) || known.Has(key) {
			continue
		}
		// group/version/resource switches one resource.
		if i := strings.LastIndex(key, "/"); i > 0 && known.Has(key[:i]) && len(validation.IsDNS1123Label(key[i+1:])) == 0 {
			continue
		}
		errs = append(errs, field.Invalid(p.Key(key), key, "Kubernetes "+KubernetesVersion+" serves no such API version (want group/version, group/version/resource or api/all, api/ga, api/beta, api/alpha)"+
			didYouMean(key, append(slices.Clone(kubeAPIVersions), runtimeConfigGroups...))))
	}
	return errs
}

// GateEnabled tells whether a feature gate is on in the lab: as set in
// featureGates, else its default.
func (c *Config) GateEnabled(name string) bool {
	if on, ok := c.FeatureGates[name]; ok {
		return on
	}
	return kubeFeatureGates[name].def
}

// GateLocked tells whether Kubernetes locks a feature gate to its default:
// naming it changes nothing, and fails the components once the release
// that removes it (as 1.38 removes DynamicResourceAllocation) runs them.
func GateLocked(name string) bool {
	return kubeFeatureGates[name].locked
}

// FeatureGatesFlag is featureGates as components take it in
// --feature-gates: "A=true,B=false", sorted; empty when none is set.
func (c *Config) FeatureGatesFlag() string {
	var kv []string
	for _, name := range slices.Sorted(maps.Keys(c.FeatureGates)) {
		kv = append(kv, fmt.Sprintf("%s=%t", name, c.FeatureGates[name]))
	}
	return strings.Join(kv, ",")
}

// RuntimeConfigFlag is runtimeConfig as the API server takes it in
// --runtime-config, sorted; empty when none is set.
func (c *Config) RuntimeConfigFlag() string {
	var kv []string
	for _, key := range slices.Sorted(maps.Keys(c.RuntimeConfig)) {
		kv = append(kv, key+"="+c.RuntimeConfig[key])
	}
	return strings.Join(kv, ",")
}

// didYouMean names the known name nearest to name, when one is near
// enough to be a misspelling: "; did you mean GenericWorkload?".
func didYouMean(name string, known []string) string {
	slices.Sort(known)
	if n := nearest.Name(name, known); n != "" {
		return "; did you mean " + n + "?"
	}
	return ""
}

// The gates and API version that serve Kubernetes 1.37's Workload and
// PodGroup API with claims a PodGroup owns, each off by default.
const (
	GateGenericWorkload           = "GenericWorkload"
	GateDRAWorkloadResourceClaims = "DRAWorkloadResourceClaims"
	WorkloadAPIVersion            = "scheduling.k8s.io/v1beta1"
	// GateOptionalNodeOperations lets a slice's devices skip the node's
	// prepare and unprepare calls (nics.skipNodeOperations).
	GateOptionalNodeOperations = "DRAOptionalNodeOperations"
	// GateListTypeAttributes lets attributes be lists
	// (nics.numaNodeList).
	GateListTypeAttributes = "DRAListTypeAttributes"
	// GateDerivedAttributes lets a request compute attributes for its
	// constraints (derivedAttributes).
	GateDerivedAttributes = "DRADerivedAttributes"
	// GateNodeAllocatableResources lets devices account node resources
	// (nodeAllocatableResources): the fake GPUs' host-memory overhead,
	// which the scheduler adds to a pod's memory on the node.
	GateNodeAllocatableResources = "DRANodeAllocatableResources"
	// GateDeviceCompatibilityGroups lets devices on one counter set
	// exclude each other (compatibilityGroups): a GPU's MIG devices and
	// its time-sliced shares (gpus.timeSlices with partitioning: mig).
	GateDeviceCompatibilityGroups = "DRADeviceCompatibilityGroups"
	// GatePartitionableDevicesType lets a slice name its devices'
	// partition-type attribute (partitionTypeAttribute): partitioned fake
	// GPUs then name theirs.
	GatePartitionableDevicesType = "DRAPartitionableDevicesType"
)

// HostMemoryOverhead says whether node n's fake GPUs publish their host
// memory overhead: where the DRANodeAllocatableResources gate is on, on a
// node whose memory is a server's, set (memory) or a real host's. A
// hollow node's default 3840Mi would fit no GPU's overhead.
func (c *Config) HostMemoryOverhead(n Node) bool {
	return c.GateEnabled(GateNodeAllocatableResources) && (n.Memory != "" || n.Kind == NodeReal)
}

// EnableGroupClaims switches on, beside the configuration's own gates, the
// PodGroup API and its claims (GenericWorkload, DRAWorkloadResourceClaims,
// scheduling.k8s.io/v1beta1), and the extra gates named.
func (c *Config) EnableGroupClaims(extra ...string) {
	if c.FeatureGates == nil {
		c.FeatureGates = map[string]bool{}
	}
	if c.RuntimeConfig == nil {
		c.RuntimeConfig = map[string]string{}
	}
	for _, g := range append([]string{GateGenericWorkload, GateDRAWorkloadResourceClaims}, extra...) {
		c.FeatureGates[g] = true
	}
	c.RuntimeConfig[WorkloadAPIVersion] = "true"
}

// ServesGroupClaims tells whether a lab of the configuration serves
// PodGroups with their claims.
func (c *Config) ServesGroupClaims() bool {
	return c.FeatureGates[GateGenericWorkload] && c.FeatureGates[GateDRAWorkloadResourceClaims] && c.RuntimeConfig[WorkloadAPIVersion] == "true"
}
