package fakegpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/internal/slicetest"
	"github.com/dralab/dralab/drivers/kit"
)

func mustProfile(t *testing.T, name string) *Profile {
	t.Helper()
	p, err := LookupProfile(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// published is a fake inventory's pool as the driver publishes it.
func published(t *testing.T, inv *Inventory) ([]kit.Device, []resourceslice.Slice) {
	t.Helper()
	ctx := context.Background()
	devs, err := inv.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := inv.CounterSets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	api := make([]resourceapi.Device, 0, len(devs))
	for _, d := range devs {
		api = append(api, d.API)
	}
	out, err := kit.Slices(api, sets)
	if err != nil {
		t.Fatal(err)
	}
	return devs, out
}

// firstFit allocates devices one at a time as the allocator does, first
// device that matches and whose counters are still free, and returns how
// many it placed: what the published counters allow.
func firstFit(sets []resourceapi.CounterSet, devs []kit.Device, match func(resourceapi.Device) bool) int {
	free := map[string]map[string]resource.Quantity{}
	for _, s := range sets {
		free[s.Name] = map[string]resource.Quantity{}
		for n, c := range s.Counters {
			free[s.Name][n] = c.Value
		}
	}
	fits := func(d resourceapi.Device) bool {
		for _, c := range d.ConsumesCounters {
			for n, q := range c.Counters {
				if have := free[c.CounterSet][n]; q.Value.Cmp(have) > 0 {
					return false
				}
			}
		}
		return true
	}
	taken := map[string]bool{}
	placed := 0
	for {
		found := false
		for _, d := range devs {
			if taken[d.API.Name] || !match(d.API) || !fits(d.API) {
				continue
			}
			for _, c := range d.API.ConsumesCounters {
				for n, q := range c.Counters {
					have := free[c.CounterSet][n]
					have.Sub(q.Value)
					free[c.CounterSet][n] = have
				}
			}
			taken[d.API.Name], found = true, true
			placed++
			break
		}
		if !found {
			return placed
		}
	}
}

func profileIs(name string) func(resourceapi.Device) bool {
	return func(d resourceapi.Device) bool {
		p := d.Attributes[gpu.AttrProfile].StringValue
		return p != nil && *p == name
	}
}

// The counters allow as many instances of each profile as NVIDIA's tables
// do, and the whole GPU only while nothing else is in use.
func TestMIGCountersAllowTheGuidesInstances(t *testing.T) {
	for profile, want := range map[string]map[string]int{
		"h100-80gb": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
		"a100-80gb": {"1g.10gb": 7, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1},
		"a100-40gb": {"1g.5gb": 7, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1},
	} {
		inv := &Inventory{Node: "n", Profile: mustProfile(t, profile), Count: 1, Partitioning: PartitioningMIG}
		devs, err := inv.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		sets, _ := inv.CounterSets(context.Background())
		if len(inv.Profile.MIG.Profiles) != len(want) {
			t.Errorf("%s has profiles %v", profile, inv.Profile.MIG.Profiles)
		}
		for mp, n := range want {
			if got := firstFit(sets, devs, profileIs(mp)); got != n {
				t.Errorf("%s: %d instances of %s fit, want %d", profile, got, mp, n)
			}
		}
		// 4g + 3g fill the GPU; then nothing else fits, the whole GPU least.
		big := map[string]string{"h100-80gb": "4g.40gb", "a100-80gb": "4g.40gb", "a100-40gb": "4g.20gb"}[profile]
		half := map[string]string{"h100-80gb": "3g.40gb", "a100-80gb": "3g.40gb", "a100-40gb": "3g.20gb"}[profile]
		if got := firstFit(sets, devs, func(d resourceapi.Device) bool { return profileIs(big)(d) || profileIs(half)(d) }); got != 2 {
			t.Errorf("%s: %s and %s together: %d fit, want 2", profile, big, half, got)
		}
		whole := func(d resourceapi.Device) bool { return *d.Attributes[gpu.AttrType].StringValue == gpu.TypeGPU }
		mixed := func(d resourceapi.Device) bool { return profileIs(big)(d) || whole(d) }
		if got := firstFit(sets, devs, mixed); got != 1 {
			t.Errorf("%s: a %s and the whole GPU: %d fit, want only one", profile, big, got)
		}
	}
	if p := mustProfile(t, "l4-24gb"); p.MIG != nil {
		t.Error("the L4 has MIG geometry")
	}
}

// A MIG node of many GPUs publishes one counter set per GPU (eight a
// slice) and its devices (at most 64 a slice, a GPU's never split), every
// slice valid for the API server, each GPU's devices smallest first and
// the whole GPU last, consuming all its counters.
func TestMIGSlices(t *testing.T) {
	const gpus = 64
	inv := &Inventory{Node: "gpu-h100", Profile: mustProfile(t, "h100-80gb"), Count: gpus, Partitioning: PartitioningMIG}
	devs, pool := published(t, inv)
	slicetest.Validate(t, gpu.DriverName, inv.Node, pool)
	perGPU := 7 + 4 + 3 + 2 + 1 + 1 + 1
	if len(devs) != gpus*perGPU {
		t.Fatalf("%d devices, want %d per GPU", len(devs), perGPU)
	}
	setSlices, devSlices := 0, 0
	for _, s := range pool {
		if len(s.SharedCounters) > 0 {
			setSlices++
		} else {
			devSlices++
		}
	}
	// 64 sets, 8 a slice; 19 devices a GPU, 3 GPUs (57 devices) a slice.
	if setSlices != 8 || devSlices != 22 {
		t.Errorf("%d slices of counter sets and %d of devices, want 8 and 22", setSlices, devSlices)
	}

	var gpu0 []string
	for _, d := range devs {
		if strings.HasPrefix(d.API.Name, "gpu-0-") || d.API.Name == "gpu-0" {
			gpu0 = append(gpu0, d.API.Name)
		}
	}
	want := []string{
		"gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1", "gpu-0-mig-1g10gb-2", "gpu-0-mig-1g10gb-3", "gpu-0-mig-1g10gb-4", "gpu-0-mig-1g10gb-5", "gpu-0-mig-1g10gb-6",
		"gpu-0-mig-1g20gb-0", "gpu-0-mig-1g20gb-2", "gpu-0-mig-1g20gb-4", "gpu-0-mig-1g20gb-6",
		"gpu-0-mig-2g20gb-0", "gpu-0-mig-2g20gb-2", "gpu-0-mig-2g20gb-4",
		"gpu-0-mig-3g40gb-0", "gpu-0-mig-3g40gb-4", "gpu-0-mig-4g40gb-0", "gpu-0-mig-7g80gb-0", "gpu-0",
	}
	if !slices.Equal(gpu0, want) {
		t.Errorf("gpu-0's devices in order:\n%v\nwant\n%v", gpu0, want)
	}

	sets, _ := inv.CounterSets(context.Background())
	set := sets[0]
	if set.Name != "gpu-0-counters" || len(set.Counters) != 6+8 {
		t.Errorf("counter set %s has %d counters: %v", set.Name, len(set.Counters), set.Counters)
	}
	for name, want := range map[string]string{"memory": "81559Mi", "multiprocessors": "112", "copy-engines": "8", "decoders": "7", "jpeg-engines": "7", "ofa-engines": "1", "memory-slice-7": "1"} {
		if got := set.Counters[name].Value; got.String() != want {
			t.Errorf("counter %s = %s, want %s", name, got.String(), want)
		}
	}
	byName := map[string]kit.Device{}
	for _, d := range devs {
		byName[d.API.Name] = d
	}
	whole := byName["gpu-0"].API
	if c := whole.ConsumesCounters; len(c) != 1 || c[0].CounterSet != set.Name || !equalCounters(c[0].Counters, set.Counters) {
		t.Errorf("the whole GPU consumes %v, want all of %s", c, set.Name)
	}
	if *whole.Attributes[gpu.AttrType].StringValue != gpu.TypeGPU || whole.Attributes[gpu.AttrProfile].StringValue != nil {
		t.Errorf("the whole GPU's attributes: %v", whole.Attributes)
	}
	mig := byName["gpu-0-mig-3g40gb-4"]
	c := mig.API.ConsumesCounters[0].Counters
	var memSlices []string
	for name := range c {
		if strings.HasPrefix(name, "memory-slice-") {
			memSlices = append(memSlices, name)
		}
	}
	slices.Sort(memSlices)
	if strings.Join(memSlices, ",") != "memory-slice-4,memory-slice-5,memory-slice-6,memory-slice-7" ||
		ptr.To(c["memory"].Value).String() != "40448Mi" || ptr.To(c["multiprocessors"].Value).String() != "48" || ptr.To(c["decoders"].Value).String() != "3" {
		t.Errorf("3g.40gb at 4 consumes %v", c)
	}
	a := mig.API.Attributes
	if *a[gpu.AttrType].StringValue != gpu.TypeMIG || *a[gpu.AttrProfile].StringValue != "3g.40gb" || *a[gpu.AttrParentUUID].StringValue != gpu.DeviceUUID("gpu-h100", 0) ||
		*a["productName"].StringValue != "NVIDIA H100 80GB HBM3" || *a["cudaComputeCapability"].VersionValue != "9.0.0" || a["uuid"].StringValue != nil {
		t.Errorf("3g.40gb attributes: %v", a)
	}
	if got := mig.API.Capacity["memory"].Value; got.String() != "40448Mi" {
		t.Errorf("3g.40gb memory capacity %s", got.String())
	}
	if mig.Env[""] != "gpu-0-mig-3g40gb-4" || mig.Env["PROFILE"] != "3g.40gb" || mig.Env["PARENT_UUID"] != gpu.DeviceUUID("gpu-h100", 0) {
		t.Errorf("3g.40gb env: %v", mig.Env)
	}
}

func equalCounters(a, b map[string]resourceapi.Counter) bool {
	if len(a) != len(b) {
		return false
	}
	for n, c := range a {
		if c.Value.Cmp(b[n].Value) != 0 {
			return false
		}
	}
	return true
}

// A shared GPU may be in several claims: memory is taken in whole GiB (a
// claim that does not say takes as much as one claim may), and every other
// capacity defaults to nothing, so that memory-only claims share it.
func TestSharedSlices(t *testing.T) {
	inv := &Inventory{Node: "gpu-l4", Profile: mustProfile(t, "l4-24gb"), Count: 2, Sharing: SharingMemory}
	devs, pool := published(t, inv)
	slicetest.Validate(t, gpu.DriverName, inv.Node, pool)
	if len(pool) != 1 || len(devs) != 2 {
		t.Fatalf("%d slices of %d devices", len(pool), len(devs))
	}
	d := devs[0].API
	if !ptr.Deref(d.AllowMultipleAllocations, false) {
		t.Error("a shared GPU does not allow multiple allocations")
	}
	mem := d.Capacity["memory"]
	pol := mem.RequestPolicy
	if mem.Value.String() != "23034Mi" || pol == nil || pol.Default.String() != "22Gi" || pol.ValidRange == nil ||
		pol.ValidRange.Min.String() != "1Gi" || pol.ValidRange.Step.String() != "1Gi" || pol.ValidRange.Max.String() != "22Gi" {
		t.Errorf("memory capacity %+v, policy %+v", mem, pol)
	}
	for name, c := range d.Capacity {
		if name != "memory" && (c.RequestPolicy == nil || c.RequestPolicy.Default == nil || !c.RequestPolicy.Default.IsZero()) {
			t.Errorf("capacity %s = %+v: a memory-only claim would take all of it", name, c)
		}
	}
	if _, ok := d.Capacity[gpu.CapacityMultiprocessors]; !ok {
		t.Error("no multiprocessors capacity")
	}
	if d.ConsumesCounters != nil {
		t.Error("a shared GPU consumes counters")
	}
}

// Plain GPUs publish what they always did: no counters, one policy-free
// memory capacity.
func TestPlainGPUsUnchanged(t *testing.T) {
	inv := &Inventory{Node: "n", Profile: mustProfile(t, "h100-80gb"), Count: 2}
	devs, pool := published(t, inv)
	if len(pool) != 1 || len(devs) != 2 {
		t.Fatalf("%d slices of %d devices", len(pool), len(devs))
	}
	for _, d := range devs {
		if len(d.API.Capacity) != 1 || d.API.Capacity["memory"].RequestPolicy != nil || d.API.ConsumesCounters != nil || d.API.AllowMultipleAllocations != nil {
			t.Errorf("%s = %+v", d.API.Name, d.API)
		}
	}
}

func TestInventoryModesAreChecked(t *testing.T) {
	for _, c := range []struct {
		inv  Inventory
		want string
	}{
		{Inventory{Profile: mustProfile(t, "l4-24gb"), Count: 1, Partitioning: PartitioningMIG}, "GPU profile l4-24gb has no MIG geometry; profiles with MIG: a100-40gb, a100-80gb, h100-80gb"},
		{Inventory{Profile: mustProfile(t, "h100-80gb"), Count: 1, Partitioning: PartitioningMIG, Sharing: SharingMemory}, `sharing "memory": a GPU is partitioned or shared, not both`},
		{Inventory{Profile: mustProfile(t, "h100-80gb"), Count: 1, Partitioning: "mps"}, `partitioning "mps": want mig`},
		{Inventory{Profile: mustProfile(t, "h100-80gb"), Count: 1, Sharing: "time"}, `sharing "time": want memory`},
	} {
		if _, err := c.inv.Devices(context.Background()); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.inv, err, c.want)
		}
	}
}

// A MIG geometry is checked when the profile is read: placements within
// the GPU, and no set of instances the memory slices allow taking more
// than the GPU has.
func TestMalformedMIG(t *testing.T) {
	dir := t.TempDir()
	base := "apiVersion: fakegpu.dralab.dev/v1alpha1\nkind: GPUProfile\nname: x\ntier: x\nproductName: X\nbrand: B\narchitecture: A\ncudaComputeCapability: '9.0'\ndriverVersion: 1.2.3\ncudaDriverVersion: '12.4'\nmemory: 8Gi\n"
	mig := func(copyEngines int, profiles string) string {
		return fmt.Sprintf("multiprocessors: 8\nmig:\n  memorySlices: 4\n  copyEngines: %d\n  profiles:\n%s", copyEngines, profiles)
	}
	small := "  - {name: 1g.2gb, id: 1, memory: 2Gi, multiprocessors: 2, copyEngines: 1, memorySlices: 1, placements: [0, 1, 2, 3]}\n"
	for name, c := range map[string]struct{ content, want string }{
		"placement beyond":      {base + mig(4, "  - {name: 2g.4gb, id: 1, memory: 4Gi, multiprocessors: 4, memorySlices: 2, placements: [0, 3]}\n"), "mig.profiles[0].placements[1]"},
		"engines overcommitted": {base + mig(3, small), "instances 1g.2gb@0 + 1g.2gb@1 + 1g.2gb@2 + 1g.2gb@3 take 4 copy-engines, the GPU has 3"},
		"bad name":              {base + mig(4, strings.Replace(small, "1g.2gb", "small", 1)), "mig.profiles[0].name"},
		"duplicate id":          {base + mig(4, small+strings.Replace(small, "1g.2gb", "1g.3gb", 1)), "mig.profiles[1].id: Duplicate"},
		"no multiprocessors":    {base + strings.Replace(mig(4, small), "multiprocessors: 8\n", "", 1), "multiprocessors: Required"},
		"unknown field":         {base + mig(4, strings.Replace(small, "id: 1", "ident: 1", 1)), `unknown field "mig.profiles[0].ident"`},
	} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := LoadProfile(file); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("LoadProfile = %v, want an error containing %q", err, c.want)
			}
		})
	}
}
