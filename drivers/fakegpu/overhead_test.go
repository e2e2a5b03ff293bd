package fakegpu

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Every whole GPU carries its profile's host-memory overhead as memory per
// pod, and nothing else; MIG devices carry none; without the option no
// device carries any (an API server without the gate would drop it).
func TestHostMemoryOverhead(t *testing.T) {
	p := mustProfile(t, "h100-80gb")
	if p.HostMemoryOverhead.Sign() <= 0 {
		t.Fatalf("h100-80gb declares no hostMemoryOverhead")
	}
	for _, on := range []bool{false, true} {
		devs, _ := published(t, &Inventory{Node: "n", Profile: p, Count: 2, Partitioning: PartitioningMIG, HostMemoryOverhead: on})
		wholes := 0
		for _, d := range devs {
			nar := d.API.NodeAllocatableResources
			if !strings.HasPrefix(d.API.Name, "gpu-") || strings.Contains(d.API.Name, "mig") {
				if nar != nil {
					t.Errorf("%s (not a whole GPU) carries %v", d.API.Name, nar)
				}
				continue
			}
			wholes++
			if !on {
				if nar != nil {
					t.Errorf("without the option %s carries %v", d.API.Name, nar)
				}
				continue
			}
			if len(nar) != 1 {
				t.Fatalf("%s: nodeAllocatableResources %v, want memory only", d.API.Name, nar)
			}
			m := nar[v1.ResourceMemory]
			if m.Mapping != nil || m.Overhead == nil || m.Overhead.PerContainer != nil || m.Overhead.PerPod == nil || m.Overhead.PerPod.Cmp(p.HostMemoryOverhead) != 0 {
				t.Errorf("%s: memory %+v, want overhead perPod %s only", d.API.Name, m, p.HostMemoryOverhead.String())
			}
		}
		if wholes != 2 {
			t.Errorf("found %d whole GPUs, want 2", wholes)
		}
	}
}

func TestHostMemoryOverheadNeedsTheProfilesFigure(t *testing.T) {
	p := *mustProfile(t, "l4-24gb")
	p.HostMemoryOverhead = resource.Quantity{}
	err := (&Inventory{Node: "n", Profile: &p, Count: 1, HostMemoryOverhead: true}).Validate()
	if err == nil || !strings.Contains(err.Error(), "hostMemoryOverhead") {
		t.Fatalf("Validate() = %v, want an error naming hostMemoryOverhead", err)
	}
	if _, err := ParseProfile("x.yaml", []byte(strings.Replace(mustYAML(t, "l4-24gb.yaml"), "hostMemoryOverhead: 2Gi", "hostMemoryOverhead: -1Gi", 1))); err == nil || !strings.Contains(err.Error(), "x.yaml") || !strings.Contains(err.Error(), "hostMemoryOverhead") {
		t.Fatalf("a negative overhead: %v, want an error naming the file and the field", err)
	}
}

func mustYAML(t *testing.T, name string) string {
	t.Helper()
	data, err := builtin.ReadFile("profiles/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "hostMemoryOverhead: 2Gi") {
		t.Fatalf("%s has no hostMemoryOverhead: 2Gi", name)
	}
	return string(data)
}
