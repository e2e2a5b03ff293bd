package config

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// FabricPool is an enclosure of network-attached GPUs that several of the
// lab's nodes reach: Count fake GPUs of a profile, published once for
// every node that reaches them (drivers/fabric), reached by the nodes whose
// labels match NodeSelector, by every node (AllNodes), or device by device
// (PerDevice: device i by the nodes whose labels match PerDevice[i]).
type FabricPool struct {
	// Name names the pool (the enclosure); its devices are
	// <name>-gpu-<i>.
	Name    string `json:"name"`
	Profile string `json:"profile"`
	Count   int    `json:"count"`

	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	AllNodes     bool                `json:"allNodes,omitempty"`
	PerDevice    []map[string]string `json:"perDevice,omitempty"`

	// AttachDelay, when set, makes the enclosure's GPUs attach to the
	// node a pod goes to (binding conditions, KEP-5007): the lab's attach
	// controller, playing the fabric manager, takes this long (0s to 5m)
	// and then says attached, or failed for the GPUs of AttachFails. The
	// GPUs of AttachHangs never answer: the scheduler gives up after its
	// binding timeout (controlPlane.bindingTimeout). A GPU that failed or
	// hung is tainted in the pool, as a fabric manager marks it.
	AttachDelay string `json:"attachDelay,omitempty"`
	AttachFails []int  `json:"attachFails,omitempty"`
	AttachHangs []int  `json:"attachHangs,omitempty"`
}

// AttachDuration is the pool's attach delay; 0 where its GPUs do not
// attach (or the delay does not parse, which validation reports).
func (p FabricPool) AttachDuration() time.Duration {
	d, _ := time.ParseDuration(p.AttachDelay)
	return d
}

// MaxFabricDevices is the most devices of a pool: one ResourceSlice's.
const MaxFabricDevices = 128

func init() {
	backendLimits = append(backendLimits, backendLimit{backend: BackendKind, field: []string{"fabric"}, lab: func(c *Config) bool { return len(c.Fabric) > 0 },
		why: "the embedded backend's only: the lab process publishes the enclosures' pools"})
}

// validateFabric checks the pools' structure; their profiles are the GPU
// driver's to know (CheckGPUs).
func (c *Config) validateFabric() field.ErrorList {
	var errs field.ErrorList
	fp := field.NewPath("fabric")
	if len(c.Fabric) > 0 && c.Driver != nil {
		errs = append(errs, field.Forbidden(fp, "network-attached GPUs are dralab's driver's: not beside an outside driver"))
	}
	names := sets.New[string]()
	for i, p := range c.Fabric {
		pp := fp.Index(i)
		for _, msg := range validation.IsDNS1123Label(p.Name) {
			errs = append(errs, field.Invalid(pp.Child("name"), p.Name, msg))
		}
		if len(p.Name) > 50 {
			errs = append(errs, field.TooLong(pp.Child("name"), p.Name, 50))
		}
		if names.Has(p.Name) {
			errs = append(errs, field.Duplicate(pp.Child("name"), p.Name))
		}
		names.Insert(p.Name)
		if p.Profile == "" {
			errs = append(errs, field.Required(pp.Child("profile"), "a GPU profile, such as h100-80gb"))
		}
		if p.Count < 1 || p.Count > MaxFabricDevices {
			errs = append(errs, field.Invalid(pp.Child("count"), p.Count, fmt.Sprintf("must be between 1 and %d (one ResourceSlice)", MaxFabricDevices)))
		}
		set := 0
		if p.NodeSelector != nil {
			set++
			errs = append(errs, validateSelector(p.NodeSelector, pp.Child("nodeSelector"))...)
		}
		if p.AllNodes {
			set++
		}
		if p.PerDevice != nil {
			set++
			if len(p.PerDevice) != p.Count {
				errs = append(errs, field.Invalid(pp.Child("perDevice"), len(p.PerDevice), fmt.Sprintf("one node selector per device: want %d", p.Count)))
			}
			for j, sel := range p.PerDevice {
				errs = append(errs, validateSelector(sel, pp.Child("perDevice").Index(j))...)
			}
		}
		if set != 1 {
			errs = append(errs, field.Invalid(pp, p.Name, "say which nodes reach the pool in exactly one way: nodeSelector, allNodes or perDevice"))
		}
		errs = append(errs, p.validateAttach(pp)...)
	}
	return errs
}

// validateAttach checks the attach delay and the GPUs that fail or hang.
func (p FabricPool) validateAttach(pp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if p.AttachDelay == "" {
		if len(p.AttachFails) > 0 || len(p.AttachHangs) > 0 {
			errs = append(errs, field.Forbidden(pp.Child("attachDelay"), "attachFails and attachHangs need attachDelay: GPUs that attach"))
		}
		return errs
	}
	if d, err := time.ParseDuration(p.AttachDelay); err != nil || d < 0 || d > MaxAttachDelay {
		errs = append(errs, field.Invalid(pp.Child("attachDelay"), p.AttachDelay, "a Go duration, 0s to 5m"))
	}
	seen := map[int]string{}
	for _, f := range []struct {
		name string
		list []int
	}{{"attachFails", p.AttachFails}, {"attachHangs", p.AttachHangs}} {
		for j, i := range f.list {
			switch {
			case i < 0 || i >= p.Count:
				errs = append(errs, field.Invalid(pp.Child(f.name).Index(j), i, fmt.Sprintf("a GPU's index, 0 to %d", p.Count-1)))
			case seen[i] != "":
				errs = append(errs, field.Duplicate(pp.Child(f.name).Index(j), i))
			}
			seen[i] = f.name
		}
	}
	return errs
}

// validateSelector checks a node selector of labels (every one must match).
func validateSelector(sel map[string]string, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if len(sel) == 0 {
		errs = append(errs, field.Required(p, "at least one label"))
	}
	for k, v := range sel {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(p.Key(k), k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(p.Key(k), v, msg))
		}
	}
	return errs
}
