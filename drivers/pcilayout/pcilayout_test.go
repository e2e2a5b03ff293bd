package pcilayout

import "testing"

// GPU i and NIC i share a root and a NUMA node, never a bus; two of each
// kind share a root; roots spread over two NUMA nodes per domain.
func TestGPUsAndNICsLineUp(t *testing.T) {
	buses := map[string]string{}
	perRoot := map[string]int{}
	numaRoots := map[int]map[string]bool{}
	for i := range 16 {
		g, n := GPU(i), NIC(i)
		if g.PCIeRoot() != n.PCIeRoot() || g.NUMANode != n.NUMANode {
			t.Errorf("GPU %d at %s NUMA %d, NIC %d at %s NUMA %d: want the same root and NUMA node", i, g.PCIeRoot(), g.NUMANode, i, n.PCIeRoot(), n.NUMANode)
		}
		for kind, s := range map[string]Slot{"GPU": g, "NIC": n} {
			if other, ok := buses[s.BusID()]; ok {
				t.Errorf("%s %d and %s share bus %s", kind, i, other, s.BusID())
			}
			buses[s.BusID()] = kind
			if s.Bus <= s.RootBus {
				t.Errorf("%s %d: bus %#x not below its root %#x", kind, i, s.Bus, s.RootBus)
			}
		}
		perRoot[g.PCIeRoot()]++
		if numaRoots[g.NUMANode] == nil {
			numaRoots[g.NUMANode] = map[string]bool{}
		}
		numaRoots[g.NUMANode][g.PCIeRoot()] = true
	}
	if len(perRoot) != 8 {
		t.Errorf("16 GPUs over %d roots, want 8 (4 per domain): %v", len(perRoot), perRoot)
	}
	for root, n := range perRoot {
		if n != 2 {
			t.Errorf("root %s has %d GPUs, want 2", root, n)
		}
	}
	if len(numaRoots) != 4 {
		t.Errorf("16 GPUs on %d NUMA nodes, want 4", len(numaRoots))
	}
	for numa, roots := range numaRoots {
		if len(roots) != 2 {
			t.Errorf("NUMA node %d has roots %v, want 2", numa, roots)
		}
	}
	if got := GPU(0).PCIeRoot(); got != "pci0000:15" {
		t.Errorf("GPU 0's root = %s, want pci0000:15", got)
	}
	if got := NIC(9).BusID(); got != "0001:19:00.0" {
		t.Errorf("NIC 9's bus = %s, want 0001:19:00.0", got)
	}
}
