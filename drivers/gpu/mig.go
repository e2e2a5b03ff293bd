package gpu

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/kit"
)

// MIG is a GPU model's Multi-Instance GPU geometry. The GPU's memory is cut
// into MemorySlices slices; a GPU instance of a profile takes a run of them
// at one of the profile's placements, with the profile's share of the GPU's
// memory, multiprocessors and engines. Which instances fit together is
// decided by the memory slices; the other amounts follow from them.
type MIG struct {
	// MemorySlices is the number of memory slices, 8 on A100 and H100.
	MemorySlices int `json:"memorySlices"`
	// Engines are the GPU's engines, which its instances share out.
	Engines `json:",inline"`
	// Profiles are the GPU instance profiles, e.g. 1g.10gb.
	Profiles []MIGProfile `json:"profiles"`
}

// Engines count a GPU's or a GPU instance's engines.
type Engines struct {
	CopyEngines int `json:"copyEngines,omitempty"`
	Decoders    int `json:"decoders,omitempty"`
	Encoders    int `json:"encoders,omitempty"`
	JPEGs       int `json:"jpegs,omitempty"`
	OFAs        int `json:"ofas,omitempty"`
}

// MIGProfile is a GPU instance profile, as nvidia-smi mig -lgip lists it.
type MIGProfile struct {
	// Name is the profile's name, e.g. "1g.10gb": compute slices and memory.
	Name string `json:"name"`
	// ID is NVML's GPU instance profile ID, e.g. 19 for 1g.10gb on an H100.
	ID int `json:"id"`
	// Memory is the instance's memory, as NVML reports it.
	Memory          resource.Quantity `json:"memory"`
	Multiprocessors int               `json:"multiprocessors"`
	Engines         `json:",inline"`
	// MemorySlices is the number of memory slices an instance covers.
	MemorySlices int `json:"memorySlices"`
	// Placements are the memory slices an instance may start at
	// (nvidia-smi mig -lgipp); it covers MemorySlices from there.
	Placements []int `json:"placements"`
}

// DeviceNamePart is the profile's name as a device name may hold it:
// 1g.10gb → 1g10gb, and NVML's 1g.5gb+me (media extensions) → 1g5gbme.
func (p MIGProfile) DeviceNamePart() string {
	return strings.NewReplacer(".", "", "+", "").Replace(p.Name)
}

// Counter names of a MIG GPU's counter set: one per capacity dimension and
// one per memory slice (MemorySliceCounter).
const (
	CounterMemory          = "memory"
	CounterMultiprocessors = "multiprocessors"
	CounterCopyEngines     = "copy-engines"
	CounterDecoders        = "decoders"
	CounterEncoders        = "encoders"
	CounterJPEGs           = "jpeg-engines"
	CounterOFAs            = "ofa-engines"
)

// MemorySliceCounter names the counter of memory slice i.
func MemorySliceCounter(i int) string { return fmt.Sprintf("memory-slice-%d", i) }

// amounts are what something takes of a GPU's counters, by counter name;
// a dimension of zero is no counter.
type amounts map[string]resource.Quantity

func newAmounts(memory resource.Quantity, multiprocessors int, e Engines) amounts {
	a := amounts{}
	if memory.Sign() > 0 {
		a[CounterMemory] = memory
	}
	for name, n := range map[string]int{
		CounterMultiprocessors: multiprocessors, CounterCopyEngines: e.CopyEngines, CounterDecoders: e.Decoders,
		CounterEncoders: e.Encoders, CounterJPEGs: e.JPEGs, CounterOFAs: e.OFAs,
	} {
		if n > 0 {
			a[name] = *resource.NewQuantity(int64(n), resource.DecimalSI)
		}
	}
	return a
}

// counters are the amounts as the API's counters.
func (a amounts) counters() map[string]resourceapi.Counter {
	out := make(map[string]resourceapi.Counter, len(a))
	for name, q := range a {
		out[name] = resourceapi.Counter{Value: q}
	}
	return out
}

// bySize returns the profiles smallest first: fewest memory slices, then
// fewest multiprocessors, then least memory.
func (m *MIG) bySize() []MIGProfile {
	out := slices.Clone(m.Profiles)
	slices.SortStableFunc(out, func(a, b MIGProfile) int {
		return cmp.Or(cmp.Compare(a.MemorySlices, b.MemorySlices), cmp.Compare(a.Multiprocessors, b.Multiprocessors), a.Memory.Cmp(b.Memory))
	})
	return out
}

func (m *MIG) gpuAmounts(memory resource.Quantity, multiprocessors int) amounts {
	a := newAmounts(memory, multiprocessors, m.Engines)
	for i := range m.MemorySlices {
		a[MemorySliceCounter(i)] = resource.MustParse("1")
	}
	return a
}

// Counters are the counter set of a GPU of this geometry with the given
// memory and multiprocessors: what its whole device consumes, and what its
// MIG devices draw from.
func (m *MIG) Counters(memory resource.Quantity, multiprocessors int) map[string]resourceapi.Counter {
	return m.gpuAmounts(memory, multiprocessors).counters()
}

// placementAmounts are what an instance of profile mp at start takes.
func placementAmounts(mp MIGProfile, start int) amounts {
	a := newAmounts(mp.Memory, mp.Multiprocessors, mp.Engines)
	for i := start; i < start+mp.MemorySlices; i++ {
		a[MemorySliceCounter(i)] = resource.MustParse("1")
	}
	return a
}

// profileName is what NVIDIA calls GPU instance profiles: <compute
// slices>g.<memory>gb.
var profileName = regexp.MustCompile(`^[1-9][0-9]*g\.[1-9][0-9]*gb$`)

// maxMemorySlices leaves the counter set within the API's 32 counters.
const maxMemorySlices = 8

// Validate checks the geometry of a GPU with the given memory and
// multiprocessors, naming the fields below fp: placements within the GPU,
// and no set of instances the memory slices allow taking more than the
// GPU has.
func (m *MIG) Validate(memory resource.Quantity, multiprocessors int, fp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if m.MemorySlices < 1 || m.MemorySlices > maxMemorySlices {
		errs = append(errs, field.Invalid(fp.Child("memorySlices"), m.MemorySlices, fmt.Sprintf("must be between 1 and %d", maxMemorySlices)))
		return errs
	}
	if len(m.Profiles) == 0 {
		errs = append(errs, field.Required(fp.Child("profiles"), "a GPU with MIG has GPU instance profiles"))
	}
	totals := m.gpuAmounts(memory, multiprocessors)
	names, ids := map[string]bool{}, map[int]bool{}
	for i, mp := range m.Profiles {
		pp := fp.Child("profiles").Index(i)
		if !profileName.MatchString(mp.Name) {
			errs = append(errs, field.Invalid(pp.Child("name"), mp.Name, "must be a GPU instance profile name such as 1g.10gb"))
		}
		if names[mp.Name] {
			errs = append(errs, field.Duplicate(pp.Child("name"), mp.Name))
		}
		if ids[mp.ID] {
			errs = append(errs, field.Duplicate(pp.Child("id"), mp.ID))
		}
		names[mp.Name], ids[mp.ID] = true, true
		if mp.Memory.Sign() <= 0 {
			errs = append(errs, field.Invalid(pp.Child("memory"), mp.Memory.String(), "must be positive"))
		}
		if mp.Multiprocessors <= 0 {
			errs = append(errs, field.Invalid(pp.Child("multiprocessors"), mp.Multiprocessors, "must be positive"))
		}
		if mp.MemorySlices < 1 || mp.MemorySlices > m.MemorySlices {
			errs = append(errs, field.Invalid(pp.Child("memorySlices"), mp.MemorySlices, fmt.Sprintf("must be between 1 and the GPU's %d", m.MemorySlices)))
			continue
		}
		if len(mp.Placements) == 0 {
			errs = append(errs, field.Required(pp.Child("placements"), "the memory slices an instance may start at"))
		}
		for j, start := range mp.Placements {
			if start < 0 || start+mp.MemorySlices > m.MemorySlices {
				errs = append(errs, field.Invalid(pp.Child("placements").Index(j), start, fmt.Sprintf("an instance of %d memory slices must start between 0 and %d", mp.MemorySlices, m.MemorySlices-mp.MemorySlices)))
			}
			if slices.Index(mp.Placements, start) != j {
				errs = append(errs, field.Duplicate(pp.Child("placements").Index(j), start))
			}
		}
	}
	if len(errs) == 0 {
		if over := m.overcommit(totals); over != "" {
			errs = append(errs, field.Invalid(fp.Child("profiles"), "", over))
		}
	}
	return errs
}

// overcommit checks every set of instances whose memory slices do not
// overlap against the GPU's totals: the counters must never refuse what
// the memory slices allow, or the published devices would not be the GPU's
// geometry. It returns the first set that does not fit, "" if all fit.
func (m *MIG) overcommit(totals amounts) string {
	type placement struct {
		name string
		mask uint
		take amounts
	}
	var all []placement
	for _, mp := range m.Profiles {
		for _, start := range mp.Placements {
			all = append(all, placement{
				name: fmt.Sprintf("%s@%d", mp.Name, start),
				mask: (1<<mp.MemorySlices - 1) << start,
				take: placementAmounts(mp, start),
			})
		}
	}
	used := amounts{}
	var chosen []string
	var walk func(i int, mask uint) string
	walk = func(i int, mask uint) string {
		for name, q := range used {
			if total := totals[name]; q.Cmp(total) > 0 {
				return fmt.Sprintf("instances %s take %s %s, the GPU has %s", strings.Join(chosen, " + "), q.String(), name, total.String())
			}
		}
		for j := i; j < len(all); j++ {
			pl := all[j]
			if mask&pl.mask != 0 {
				continue
			}
			for name, q := range pl.take {
				sum := used[name]
				sum.Add(q)
				used[name] = sum
			}
			chosen = append(chosen, pl.name)
			over := walk(j+1, mask|pl.mask)
			chosen = chosen[:len(chosen)-1]
			for name, q := range pl.take {
				sum := used[name]
				sum.Sub(q)
				used[name] = sum
			}
			if over != "" {
				return over
			}
		}
		return ""
	}
	return walk(0, 0)
}

// MIGDeviceName names the MIG device of profile mp at memory slice start
// of GPU parent: gpu-0-mig-1g10gb-3.
func MIGDeviceName(parent string, mp MIGProfile, start int) string {
	return fmt.Sprintf("%s-mig-%s-%d", parent, mp.DeviceNamePart(), start)
}

// MIGDevices are the MIG devices of a partitioned GPU: every placement of
// every profile of geometry m, smallest profile first, each consuming its
// share of the GPU's counter set and carrying the parent's product
// attributes besides its own.
func MIGDevices(parent, parentUUID, productName, counterSet string, product map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, m *MIG) []kit.Device {
	var out []kit.Device
	for _, mp := range m.bySize() {
		for _, start := range mp.Placements {
			out = append(out, migDevice(parent, parentUUID, productName, counterSet, product, mp, start))
		}
	}
	return out
}

func migDevice(parent, parentUUID, productName, counterSet string, product map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, mp MIGProfile, start int) kit.Device {
	name := MIGDeviceName(parent, mp, start)
	// The parent's product attributes, and the instance's own.
	attrs := maps.Clone(product)
	if attrs == nil {
		attrs = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	}
	attrs[AttrType] = resourceapi.DeviceAttribute{StringValue: ptr.To(TypeMIG)}
	attrs[AttrProfile] = resourceapi.DeviceAttribute{StringValue: ptr.To(mp.Name)}
	attrs[AttrParentUUID] = resourceapi.DeviceAttribute{StringValue: ptr.To(parentUUID)}
	return kit.Device{
		API: resourceapi.Device{
			Name:       name,
			Attributes: attrs,
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				CapacityMemory:          {Value: mp.Memory},
				CapacityMultiprocessors: {Value: *resource.NewQuantity(int64(mp.Multiprocessors), resource.DecimalSI)},
			},
			ConsumesCounters: []resourceapi.DeviceCounterConsumption{{CounterSet: counterSet, Counters: placementAmounts(mp, start).counters()}},
		},
		Env:        map[string]string{"": name, "PROFILE": mp.Name, "PARENT_UUID": parentUUID, "PRODUCT": productName},
		StatusData: map[string]string{"profile": mp.Name, "parentUUID": parentUUID, "productName": productName},
	}
}
