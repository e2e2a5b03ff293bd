package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletapis "k8s.io/kubelet/pkg/apis"
)

func (cp *ControlPlane) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	positive := func(name string, v int32, max int32) {
		if v < 0 || v > max {
			errs = append(errs, field.Invalid(p.Child(name), v, fmt.Sprintf("must be between 1 and %d (0 or unset: the default)", max)))
		}
	}
	positive("clientQPS", cp.ClientQPS, 100000)
	positive("parallelism", cp.Parallelism, 1024)
	positive("dynamicResourcesWeight", cp.DynamicResourcesWeight, 100)
	positive("claimWorkers", cp.ClaimWorkers, 1000)
	positive("gcPercent", cp.GCPercent, 10000)
	if cp.BindingTimeout != "" {
		if d, err := time.ParseDuration(cp.BindingTimeout); err != nil || d < 5*time.Second || d > 10*time.Minute {
			errs = append(errs, field.Invalid(p.Child("bindingTimeout"), cp.BindingTimeout, "a Go duration, 5s to 10m (unset: 10m)"))
		}
	}
	if v := cp.PercentageOfNodesToScore; v != nil && (*v < 1 || *v > 100) {
		errs = append(errs, field.Invalid(p.Child("percentageOfNodesToScore"), *v, "must be between 1 and 100 (unset: 10)"))
	}
	return errs
}

func (t *Topology) validate(tp *field.Path, labels map[string]string) field.ErrorList {
	var errs field.ErrorList
	if t.Rack == "" && t.NVLinkDomain == "" {
		errs = append(errs, field.Required(tp, "a rack, an nvlinkDomain or both; or drop topology"))
	}
	for _, f := range []struct{ name, value, label string }{{"rack", t.Rack, LabelRack}, {"nvlinkDomain", t.NVLinkDomain, LabelNVLinkDomain}} {
		if f.value == "" {
			continue
		}
		for _, msg := range validation.IsValidLabelValue(f.value) {
			errs = append(errs, field.Invalid(tp.Child(f.name), f.value, msg+" (it becomes the node label "+f.label+")"))
		}
		if v, ok := labels[f.label]; ok && v != f.value {
			errs = append(errs, field.Invalid(tp.Child(f.name), f.value, fmt.Sprintf("labels sets %s=%s too: give the %s once, here", f.label, v, f.name)))
		}
	}
	return errs
}

// reservedForKubelets tells a label of Kubernetes' domains that no kubelet
// may register with (what kubelet's --node-labels and the NodeRestriction
// admission plugin refuse).
func reservedForKubelets(key string) bool {
	domain, _, ok := strings.Cut(key, "/")
	if !ok {
		return false
	}
	ours := func(d string) bool { return domain == d || strings.HasSuffix(domain, "."+d) }
	return (ours("kubernetes.io") || ours("k8s.io")) && !kubeletapis.IsKubeletLabel(key)
}

func (c *Config) validate() field.ErrorList {
	var errs field.ErrorList
	if c.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), c.APIVersion, []string{APIVersion}))
	}
	if c.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), c.Kind, []string{Kind}))
	}
	for _, msg := range validation.IsDNS1123Label(c.Name) {
		errs = append(errs, field.Invalid(field.NewPath("name"), c.Name, msg))
	}
	if c.Backend != BackendEmbedded && c.Backend != BackendKind {
		errs = append(errs, field.NotSupported(field.NewPath("backend"), c.Backend, []string{BackendEmbedded, BackendKind}))
	}
	if c.NodeImage != "" && strings.ContainsAny(c.NodeImage, " \t\n") {
		errs = append(errs, field.Invalid(field.NewPath("nodeImage"), c.NodeImage, "an image reference, such as "+KindNodeImage))
	}
	if c.APIServerPort < 0 || c.APIServerPort > 65535 {
		errs = append(errs, field.Invalid(field.NewPath("apiServerPort"), c.APIServerPort, "must be between 0 (pick a free port) and 65535"))
	}
	errs = append(errs, c.validateFeatureGates()...)
	nodesPath := field.NewPath("nodes")
	switch {
	case c.Nodes == nil:
		errs = append(errs, field.Required(nodesPath, "a lab needs nodes (nodes: [] for a control plane without nodes)"))
	case len(c.Nodes) == 0 && c.Backend != BackendEmbedded:
		errs = append(errs, field.Required(nodesPath, "a kind lab needs at least one node"))
	}
	errs = append(errs, c.labLimits()...)
	if c.ControlPlane != nil {
		cpPath := field.NewPath("controlPlane")
		errs = append(errs, c.ControlPlane.validate(cpPath)...)
	}
	names := sets.New[string]()
	realNodes := 0
	for i, n := range c.Nodes {
		p := nodesPath.Index(i)
		for _, msg := range validation.IsDNS1123Label(n.Name) {
			errs = append(errs, field.Invalid(p.Child("name"), n.Name, msg))
		}
		if names.Has(n.Name) {
			errs = append(errs, field.Duplicate(p.Child("name"), n.Name))
		}
		names.Insert(n.Name)
		limitErrs, limited := c.nodeLimits(&n, p)
		errs = append(errs, limitErrs...)
		switch n.Kind {
		case NodeHollow:
		case NodeReal:
			realNodes++
			if realNodes > 1 {
				errs = append(errs, field.Forbidden(p.Child("kind"), "at most one real node per host: the kubelet's device-plugin socket path is fixed"))
			}
		default:
			errs = append(errs, field.NotSupported(p.Child("kind"), n.Kind, []string{NodeHollow, NodeReal}))
		}
		for k, v := range n.Labels {
			lp := p.Child("labels").Key(k)
			for _, msg := range validation.IsQualifiedName(k) {
				errs = append(errs, field.Invalid(lp, k, msg))
			}
			for _, msg := range validation.IsValidLabelValue(v) {
				errs = append(errs, field.Invalid(lp, v, msg))
			}
			if reservedForKubelets(k) {
				errs = append(errs, field.Invalid(lp, k, "a kubelet may set no label of the kubernetes.io and k8s.io domains but Kubernetes' own (the NodeRestriction admission plugin refuses the node): use a domain of your own, as topology.dralab.dev/rack is"))
			}
		}
		errs = append(errs, validateTaints(n.Taints, p.Child("taints"))...)
		if n.Topology != nil {
			errs = append(errs, n.Topology.validate(p.Child("topology"), n.Labels)...)
		}
		if n.Memory != "" {
			m, err := resource.ParseQuantity(n.Memory)
			switch {
			case err != nil:
				errs = append(errs, field.Invalid(p.Child("memory"), n.Memory, "want a quantity such as 64Gi"))
			case limited.Has("memory"):
			case n.Kind == NodeReal:
				errs = append(errs, field.Forbidden(p.Child("memory"), "a real node reports its host's memory: memory sets a hollow node's"))
			case m.Cmp(MinNodeMemory) < 0 || m.Cmp(MaxNodeMemory) > 0:
				errs = append(errs, field.Invalid(p.Child("memory"), n.Memory, fmt.Sprintf("must be between %s and %s", MinNodeMemory.String(), MaxNodeMemory.String())))
			}
		}
		for _, s := range n.deviceSections() {
			if s.isSet() {
				errs = append(errs, s.validate(c, &n, p, limited)...)
			}
		}
	}
	if c.Driver != nil {
		errs = append(errs, c.Driver.validate(field.NewPath("driver"))...)
	}
	errs = append(errs, c.validateFabric()...)
	return errs
}

// GPUCatalog is what only the GPU driver knows of the names a GPUs section
// may use. The lab checks a configuration against the driver's
// (CheckGPUs) before it changes anything; lab/config itself depends on no
// driver.
type GPUCatalog interface {
	// Profiles are the fake GPU profiles; MIGProfiles those of them with
	// a MIG geometry.
	Profiles() []string
	MIGProfiles() []string
	// NVMLMocks are go-nvml's mock servers.
	NVMLMocks() []string
	// NICProfiles are the NIC driver's profiles: the catalog of the
	// lab's drivers, the NIC driver's beside the GPU driver's.
	NICProfiles() []string
}

// CheckGPUs checks the names of every GPUs section against the driver's
// catalog: a profile that exists (with a MIG geometry when partitioned),
// an NVML mock server that exists. Errors name the file and the field.
func (c *Config) CheckGPUs(cat GPUCatalog) error {
	var errs field.ErrorList
	for i, p := range c.Fabric {
		if p.Profile != "" && !slices.Contains(cat.Profiles(), p.Profile) {
			errs = append(errs, field.NotSupported(field.NewPath("fabric").Index(i).Child("profile"), p.Profile, cat.Profiles()))
		}
	}
	for i, n := range c.Nodes {
		if n.NICs != nil && n.NICs.Profile != "" && !slices.Contains(cat.NICProfiles(), n.NICs.Profile) {
			errs = append(errs, field.NotSupported(field.NewPath("nodes").Index(i).Child("nics", "profile"), n.NICs.Profile, cat.NICProfiles()))
		}
		g := n.GPUs
		if g == nil {
			continue
		}
		gp := field.NewPath("nodes").Index(i).Child("gpus")
		switch {
		case g.NVML != "":
			if mock, ok := strings.CutPrefix(g.NVML, NVMLMockPrefix); ok && !slices.Contains(cat.NVMLMocks(), mock) {
				choices := []string{NVMLHost}
				for _, m := range cat.NVMLMocks() {
					choices = append(choices, NVMLMockPrefix+m)
				}
				errs = append(errs, field.NotSupported(gp.Child("nvml"), g.NVML, choices))
			}
		case !slices.Contains(cat.Profiles(), g.Profile):
			errs = append(errs, field.NotSupported(gp.Child("profile"), g.Profile, cat.Profiles()))
		case g.Partitioning == PartitioningMIG && !slices.Contains(cat.MIGProfiles(), g.Profile):
			errs = append(errs, field.Invalid(gp.Child("partitioning"), g.Partitioning,
				fmt.Sprintf("GPU profile %s has no MIG geometry; profiles with MIG: %s", g.Profile, strings.Join(cat.MIGProfiles(), ", "))))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w %s: %w", ErrInvalid, c.Source(), errs.ToAggregate())
	}
	return nil
}
