package fakegpu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
)

func TestBuiltinProfiles(t *testing.T) {
	profiles, err := Builtin()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]struct{ arch, cc, tier string }{
		"h100-80gb": {"Hopper", "9.0", "h100"},
		"a100-80gb": {"Ampere", "8.0", "a100"},
		"a100-40gb": {"Ampere", "8.0", "a100"},
		"l4-24gb":   {"Ada Lovelace", "8.9", "l4"},
	}
	for name, w := range want {
		p, ok := profiles[name]
		if !ok {
			t.Errorf("no built-in profile %s", name)
			continue
		}
		if p.Architecture != w.arch || p.CUDAComputeCapability != w.cc || p.Tier != w.tier {
			t.Errorf("%s = %s CC %s tier %s, want %s CC %s tier %s", name, p.Architecture, p.CUDAComputeCapability, p.Tier, w.arch, w.cc, w.tier)
		}
	}
}

func TestUnknownProfileNamesTheChoices(t *testing.T) {
	_, err := LookupProfile("h200-141gb")
	if !errors.Is(err, ErrUnknownProfile) || !strings.Contains(err.Error(), `"h200-141gb"`) || !strings.Contains(err.Error(), "l4-24gb") {
		t.Errorf("LookupProfile(unknown) = %v", err)
	}
}

func TestMalformedProfileFile(t *testing.T) {
	dir := t.TempDir()
	base := "apiVersion: fakegpu.dralab.dev/v1alpha1\nkind: GPUProfile\nname: x\ntier: x\nproductName: X\nbrand: B\narchitecture: A\ncudaComputeCapability: '9.0'\ndriverVersion: 1.2.3\ncudaDriverVersion: '12.4'\n"
	cases := map[string]struct{ content, want string }{
		"unknown field": {base + "memory: 1Gi\ncolour: red\n", `unknown field "colour"`},
		"bad memory":    {base + "memory: lots\n", "memory"},
		"no memory":     {base, "memory"},
		"bad version":   {strings.Replace(base, "1.2.3", "one.two", 1) + "memory: 1Gi\n", "driverVersion"},
		"not yaml":      {"{{{", "yaml"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := LoadProfile(file)
			if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("LoadProfile = %v, want an error naming %s and %q", err, file, c.want)
			}
		})
	}
}

func TestInventoryIsDeterministicPerNode(t *testing.T) {
	p, err := LookupProfile("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a1, _ := (&Inventory{Node: "a", Profile: p, Count: 8}).Devices(ctx)
	a2, _ := (&Inventory{Node: "a", Profile: p, Count: 8}).Devices(ctx)
	b, _ := (&Inventory{Node: "b", Profile: p, Count: 8}).Devices(ctx)
	uuids := map[string]bool{}
	roots := map[string]int{}
	for i := range a1 {
		if a1[i].API.Name != "gpu-"+string(rune('0'+i)) {
			t.Errorf("device %d is named %s", i, a1[i].API.Name)
		}
		u1, u2, ub := *a1[i].API.Attributes["uuid"].StringValue, *a2[i].API.Attributes["uuid"].StringValue, *b[i].API.Attributes["uuid"].StringValue
		if u1 != u2 {
			t.Errorf("gpu-%d UUID changes between runs: %s, %s", i, u1, u2)
		}
		if u1 == ub || uuids[u1] {
			t.Errorf("gpu-%d UUID %s is not unique", i, u1)
		}
		if !strings.HasPrefix(u1, "GPU-") || len(u1) != 40 {
			t.Errorf("UUID %q is not in NVML's form", u1)
		}
		uuids[u1] = true
		roots[*a1[i].API.Attributes["resource.kubernetes.io/pcieRoot"].StringValue]++
		if got := a1[i].Env[""]; got != a1[i].API.Name {
			t.Errorf("env names %s for %s", got, a1[i].API.Name)
		}
		if cc := *a1[i].API.Attributes["cudaComputeCapability"].VersionValue; cc != "9.0.0" {
			t.Errorf("compute capability %s", cc)
		}
		if mem := a1[i].API.Capacity["memory"].Value; mem.String() != "81559Mi" {
			t.Errorf("memory %s", mem.String())
		}
	}
	if len(roots) != 4 {
		t.Errorf("8 GPUs sit under %d PCIe roots, want 4 pairs: %v", len(roots), roots)
	}
	for r, n := range roots {
		if n != 2 {
			t.Errorf("root %s has %d GPUs", r, n)
		}
	}
}

// The node's name is the fake inventory's node-wide edit, set once per
// container rather than per GPU.
func TestNodeEditsNameTheNode(t *testing.T) {
	p, err := LookupProfile("l4-24gb")
	if err != nil {
		t.Fatal(err)
	}
	inv := &Inventory{Node: "gpu-l4", Profile: p, Count: 2}
	if got := inv.NodeEdits(); len(got.Env) != 1 || got.Env[NodeEnv] != "gpu-l4" || got.DeviceNodes != nil {
		t.Errorf("node edits = %+v, want only %s=gpu-l4", got, NodeEnv)
	}
	devs, err := inv.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		for _, env := range []map[string]string{d.Env, d.ClaimEnv} {
			for k, v := range env {
				if k == NodeEnv || v == "gpu-l4" {
					t.Errorf("%s sets %s=%s itself", d.API.Name, k, v)
				}
			}
		}
	}
}

// A node's topology is an attribute of each of its GPUs and of their MIG
// devices, with the values of the node's labels.
func TestInventoryCarriesTheNodesTopology(t *testing.T) {
	p, err := LookupProfile("h100-80gb")
	if err != nil {
		t.Fatal(err)
	}
	topo := gpu.Topology{Rack: "r1", NVLinkDomain: "nvl-1"}
	for _, partitioning := range []string{"", PartitioningMIG} {
		inv := &Inventory{Node: "n", Profile: p, Count: 2, Partitioning: partitioning, Topology: topo}
		devs, err := inv.Devices(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range devs {
			a := d.API.Attributes
			if ptr.Deref(a[gpu.AttrRack].StringValue, "") != "r1" || ptr.Deref(a[gpu.AttrNVLinkDomain].StringValue, "") != "nvl-1" {
				t.Errorf("partitioning %q: device %s has rack %v, NVLink domain %v", partitioning, d.API.Name, a[gpu.AttrRack].StringValue, a[gpu.AttrNVLinkDomain].StringValue)
			}
		}
	}
	inv := &Inventory{Node: "n", Profile: p, Count: 1}
	devs, err := inv.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := devs[0].API.Attributes[gpu.AttrNVLinkDomain]; ok {
		t.Errorf("a GPU of a node without topology has an NVLink domain")
	}
	if l := topo.Labels(); l[gpu.NodeNVLinkDomainLabel] != "nvl-1" || l[gpu.NodeRackLabel] != "r1" {
		t.Errorf("labels %v", l)
	}
}
