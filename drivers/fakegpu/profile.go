// Package fakegpu is the inventory of dralab's fake GPU driver: GPUs that
// do not exist, described by GPU profiles (data files, one per model) with
// the attribute names NVIDIA's DRA driver publishes, so that a claim written
// for the fake driver works unchanged against the NVML driver.
package fakegpu

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dralab/dralab/drivers/conformance/strictyaml"
	"github.com/dralab/dralab/drivers/gpu"
)

// Profile file identity.
const (
	ProfileAPIVersion = "fakegpu.dralab.dev/v1alpha1"
	ProfileKind       = "GPUProfile"
)

// Profile describes a GPU model.
type Profile struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name is how lab configurations refer to the profile, e.g. "h100-80gb".
	Name string `json:"name"`
	// Tier groups models a workload treats alike: h100, a100, l4.
	Tier string `json:"tier"`
	// The attributes, as NVML reports them.
	ProductName           string `json:"productName"`
	Brand                 string `json:"brand"`
	Architecture          string `json:"architecture"`
	CUDAComputeCapability string `json:"cudaComputeCapability"`
	DriverVersion         string `json:"driverVersion"`
	CUDADriverVersion     string `json:"cudaDriverVersion"`
	// Memory is the device's memory, e.g. 81559Mi.
	Memory resource.Quantity `json:"memory"`
	// Multiprocessors is the number of streaming multiprocessors; 0: not
	// published. Partitioned and shared GPUs need it.
	Multiprocessors int `json:"multiprocessors,omitempty"`
	// MIG is the model's Multi-Instance GPU geometry; nil for a model
	// without MIG (the L4).
	MIG *gpu.MIG `json:"mig,omitempty"`
	// HostMemoryOverhead is the node memory a pod using one of these GPUs
	// needs beyond what its containers ask: pinned staging buffers and the
	// driver's per-process state. Published (Inventory.HostMemoryOverhead)
	// as the device's node-allocatable overhead per pod, which the
	// scheduler adds to the pod's memory on the node; 0: none.
	HostMemoryOverhead resource.Quantity `json:"hostMemoryOverhead,omitempty"`
}

//go:embed profiles/*.yaml
var builtin embed.FS

// ErrUnknownProfile means no profile has the name asked for.
var ErrUnknownProfile = errors.New("unknown GPU profile")

// Builtin returns the profiles shipped with dralab, by name.
func Builtin() (map[string]*Profile, error) {
	files, err := fs.Glob(builtin, "profiles/*.yaml")
	if err != nil {
		return nil, err
	}
	out := map[string]*Profile{}
	for _, f := range files {
		data, err := builtin.ReadFile(f)
		if err != nil {
			return nil, err
		}
		p, err := ParseProfile("drivers/fakegpu/"+f, data)
		if err != nil {
			return nil, err
		}
		if _, dup := out[p.Name]; dup {
			return nil, fmt.Errorf("two built-in profiles are named %q", p.Name)
		}
		out[p.Name] = p
	}
	return out, nil
}

// BuiltinNames lists the built-in profiles' names, sorted.
func BuiltinNames() []string {
	profiles, err := Builtin()
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(profiles))
	for n := range profiles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// LookupProfile returns a built-in profile by name.
func LookupProfile(name string) (*Profile, error) {
	profiles, err := Builtin()
	if err != nil {
		return nil, err
	}
	if p, ok := profiles[name]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("%w %q; built-in profiles: %s (or give a profile file)", ErrUnknownProfile, name, strings.Join(BuiltinNames(), ", "))
}

// LoadProfile reads a profile file.
func LoadProfile(file string) (*Profile, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading GPU profile: %w", err)
	}
	return ParseProfile(file, data)
}

// ParseProfile decodes a profile strictly and validates it; errors name
// source and the field.
func ParseProfile(source string, data []byte) (*Profile, error) {
	var p Profile
	if err := strictyaml.Decode(data, &p); err != nil {
		return nil, fmt.Errorf("GPU profile %s: %w", source, err)
	}
	if errs := p.validate(); len(errs) > 0 {
		return nil, fmt.Errorf("GPU profile %s: %w", source, errs.ToAggregate())
	}
	return &p, nil
}

func (p *Profile) validate() field.ErrorList {
	var errs field.ErrorList
	if p.APIVersion != ProfileAPIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), p.APIVersion, []string{ProfileAPIVersion}))
	}
	if p.Kind != ProfileKind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), p.Kind, []string{ProfileKind}))
	}
	for name, v := range map[string]string{"name": p.Name, "tier": p.Tier, "productName": p.ProductName, "brand": p.Brand, "architecture": p.Architecture} {
		if v == "" {
			errs = append(errs, field.Required(field.NewPath(name), ""))
		}
	}
	for name, v := range map[string]string{"cudaComputeCapability": p.CUDAComputeCapability, "driverVersion": p.DriverVersion, "cudaDriverVersion": p.CUDADriverVersion} {
		if _, err := gpu.NormalizeVersion(v); err != nil {
			errs = append(errs, field.Invalid(field.NewPath(name), v, err.Error()))
		}
	}
	if p.Memory.Sign() <= 0 {
		errs = append(errs, field.Invalid(field.NewPath("memory"), p.Memory.String(), "must be positive, e.g. 81559Mi"))
	}
	if p.HostMemoryOverhead.Sign() < 0 {
		errs = append(errs, field.Invalid(field.NewPath("hostMemoryOverhead"), p.HostMemoryOverhead.String(), "must not be negative"))
	}
	if p.Multiprocessors < 0 {
		errs = append(errs, field.Invalid(field.NewPath("multiprocessors"), p.Multiprocessors, "must not be negative"))
	}
	if p.MIG != nil {
		if p.Multiprocessors == 0 {
			errs = append(errs, field.Required(field.NewPath("multiprocessors"), "a GPU with MIG counts its multiprocessors: its instances draw from them"))
		}
		errs = append(errs, p.MIG.Validate(p.Memory, p.Multiprocessors, field.NewPath("mig"))...)
	}
	return errs
}
