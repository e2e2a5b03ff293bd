package config

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/dralab/dralab/lab/examples"
)

func TestExamplesAreValid(t *testing.T) {
	entries, err := fs.Glob(examples.FS, "*.yaml")
	if err != nil || len(entries) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, name := range entries {
		if _, err := Example(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := Example("gpus.yaml"); err == nil || !strings.Contains(err.Error(), "no example lab gpus.yaml in lab/examples") {
		t.Errorf("Example of a file that is not there = %v, want it named", err)
	}
}

func TestDefaultHasOneNodePerTier(t *testing.T) {
	cfg := Default()
	if cfg.Name != DefaultName || cfg.Backend != BackendEmbedded {
		t.Errorf("default lab = %q on %q, want %q on %q", cfg.Name, cfg.Backend, DefaultName, BackendEmbedded)
	}
	profiles := map[string]bool{}
	for _, n := range cfg.Nodes {
		if n.GPUs == nil {
			t.Fatalf("default node %s has no GPUs", n.Name)
		}
		profiles[strings.SplitN(n.GPUs.Profile, "-", 2)[0]] = true
	}
	for _, tier := range []string{"h100", "a100", "l4"} {
		if !profiles[tier] {
			t.Errorf("default lab has no %s node (profiles %v)", tier, profiles)
		}
	}
}

func TestControlPlaneWithoutNodes(t *testing.T) {
	cfg, err := Parse("bench.yaml", []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nname: bench\nnodes: []\ncontrolPlane: {parallelism: 4, percentageOfNodesToScore: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Nodes) != 0 {
		t.Errorf("nodes = %v, want none", cfg.Nodes)
	}
	s := cfg.ControlPlane.Settings()
	if s.Parallelism != 4 || *s.PercentageOfNodesToScore != 10 || s.ClientQPS != DefaultClientQPS || s.ClaimWorkers != DefaultClaimWorkers || s.DynamicResourcesWeight != DefaultDynamicResourcesWeight {
		t.Errorf("settings = %+v", s)
	}
	// What the lab records and its process reads back keeps the empty list.
	path := filepath.Join(t.TempDir(), "config.json")
	if err := cfg.Record(path); err != nil {
		t.Fatal(err)
	}
	back, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if back.Hash() != cfg.Hash() {
		t.Errorf("recorded config hash %s, want %s", back.Hash(), cfg.Hash())
	}
	if d := (*ControlPlane)(nil).Settings(); d.Parallelism < 2 || d.Parallelism > 16 || *d.PercentageOfNodesToScore != DefaultPercentageOfNodesToScore || d.GCPercent != 0 {
		t.Errorf("default settings = %+v", d)
	}
}

func TestParseErrorsNameFileAndField(t *testing.T) {
	const head = "apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\n"
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown top-level field", head + "nodez: []\n", []string{`unknown field "nodez"`}},
		{"unknown nested field", head + "nodes:\n- name: a\n  gpus: {profile: h100-80gb, count: 1, colour: red}\n", []string{`unknown field "nodes[0].gpus.colour"`}},
		{"wrong type", head + "nodes:\n- name: a\n  gpus: {profile: h100-80gb, count: many}\n", []string{"nodes.gpus.count", "string"}},
		{"malformed yaml", head + "nodes: [\n", []string{"yaml"}},
		{"empty", "", []string{"empty"}},
		{"wrong version", "apiVersion: v9\nkind: Lab\nnodes: [{name: a}]\n", []string{"apiVersion", `"v9"`}},
		{"no nodes", head, []string{"nodes: Required"}},
		{"bad node name", head + "nodes: [{name: Node_A}]\n", []string{"nodes[0].name", "Node_A"}},
		{"duplicate node", head + "nodes: [{name: a}, {name: a}]\n", []string{"nodes[1].name: Duplicate"}},
		{"two real nodes", head + "nodes: [{name: a, kind: real}, {name: b, kind: real}]\n", []string{"nodes[1].kind", "at most one real node"}},
		{"unknown node kind", head + "nodes: [{name: a, kind: virtual}]\n", []string{"nodes[0].kind", `"virtual"`}},
		{"zero GPUs", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 0}}]\n", []string{"nodes[0].gpus.count"}},
		{"no profile", head + "nodes: [{name: a, gpus: {count: 2}}]\n", []string{"nodes[0].gpus.profile: Required"}},
		{"bad port", head + "apiServerPort: 70000\nnodes: [{name: a}]\n", []string{"apiServerPort"}},
		{"bad backend", head + "backend: vagrant\nnodes: [{name: a}]\n", []string{"backend", `"vagrant"`}},
		{"unknown mode", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, mode: both}}]\n", []string{"nodes[0].gpus.mode", `"both"`}},
		{"bad label", head + "nodes: [{name: a, labels: {'bad key!': x}}]\n", []string{"nodes[0].labels[bad key!]"}},
		{"devices per slice past the API's", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, devicesPerSlice: 200}}]\n", []string{"nodes[0].gpus.devicesPerSlice: Invalid value", "between 1 and 128"}},
		{"devices per slice of counted GPUs", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, mode: device-plugin, devicesPerSlice: 2}}]\n", []string{"nodes[0].gpus.devicesPerSlice: Forbidden"}},
		{"devices per slice on kind", head + "backend: kind\nnodes: [{name: a, gpus: {profile: l4-24gb, count: 2, devicesPerSlice: 1}}]\n", []string{"nodes[0].gpus.devicesPerSlice: Forbidden", "embedded backend only"}},
		{"slice write interval not a duration", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, sliceWriteInterval: soon}}]\n", []string{"nodes[0].gpus.sliceWriteInterval: Invalid value", "a duration such as 1s"}},
		{"slice write interval past a minute", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, sliceWriteInterval: 2m}}]\n", []string{"nodes[0].gpus.sliceWriteInterval: Invalid value", "between 0s and 1m0s"}},
		{"slice write interval of counted GPUs", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, mode: device-plugin, sliceWriteInterval: 1s}}]\n", []string{"nodes[0].gpus.sliceWriteInterval: Forbidden", "publishes no ResourceSlice"}},
		{"slice write interval on kind", head + "backend: kind\nnodes: [{name: a, gpus: {profile: l4-24gb, count: 2, sliceWriteInterval: 1s}}]\n", []string{"nodes[0].gpus.sliceWriteInterval: Forbidden", "embedded backend only"}},
		{"taint of an unknown effect", head + "nodes: [{name: a, taints: [{key: nvidia.com/gpu, value: present, effect: NoPlace}]}]\n", []string{"nodes[0].taints[0].effect: Unsupported value", `"NoPlace"`}},
		{"taint of a bad key", head + "nodes: [{name: a, taints: [{key: 'bad key', effect: NoSchedule}]}]\n", []string{"nodes[0].taints[0].key: Invalid value"}},
		{"taint twice", head + "nodes: [{name: a, taints: [{key: k, value: a, effect: NoSchedule}, {key: k, value: b, effect: NoSchedule}]}]\n", []string{"nodes[0].taints[1]: Duplicate value"}},
		{"taint without an effect", head + "nodes: [{name: a, taints: [{key: k}]}]\n", []string{"nodes[0].taints[0].effect: Unsupported value"}},
		{"fabric pool reached two ways", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 1, allNodes: true, nodeSelector: {rack: a}}]\n", []string{"fabric[0]: Invalid value", "exactly one way"}},
		{"fabric pool reached no way", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 1}]\n", []string{"fabric[0]: Invalid value", "exactly one way"}},
		{"fabric selectors fewer than devices", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 2, perDevice: [{rack: a}]}]\n", []string{"fabric[0].perDevice: Invalid value", "want 2"}},
		{"fabric selector of a bad label", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 1, nodeSelector: {'bad key!': a}}]\n", []string{"fabric[0].nodeSelector[bad key!]"}},
		{"fabric pool twice", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 1, allNodes: true}, {name: e, profile: h100-80gb, count: 1, allNodes: true}]\n", []string{"fabric[1].name: Duplicate"}},
		{"fabric pool too big", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 129, allNodes: true}]\n", []string{"fabric[0].count", "between 1 and 128"}},
		{"fabric pool without a profile", head + "nodes: [{name: a}]\nfabric: [{name: e, count: 1, allNodes: true}]\n", []string{"fabric[0].profile: Required"}},
		{"fabric pool on kind", head + "backend: kind\nnodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 1, allNodes: true}]\n", []string{"fabric: Forbidden", "embedded backend"}},
		{"fabric pool beside an outside driver", head + "driver: {name: gpu.example.com, command: [plugin]}\nnodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 1, allNodes: true}]\n", []string{"fabric: Forbidden", "outside driver"}},
		{"fabric attach failure without a delay", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 2, allNodes: true, attachFails: [0]}]\n", []string{"fabric[0].attachDelay: Forbidden"}},
		{"fabric attach delay too long", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 2, allNodes: true, attachDelay: 6m}]\n", []string{"fabric[0].attachDelay: Invalid value", "0s to 5m"}},
		{"fabric GPU that fails and hangs", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 2, allNodes: true, attachDelay: 1s, attachFails: [1], attachHangs: [1]}]\n", []string{"fabric[0].attachHangs[0]: Duplicate"}},
		{"fabric GPU out of range", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: h100-80gb, count: 2, allNodes: true, attachDelay: 1s, attachFails: [2]}]\n", []string{"fabric[0].attachFails[0]: Invalid value", "0 to 1"}},
		{"binding timeout too short", head + "controlPlane: {bindingTimeout: 1s}\nnodes: [{name: a}]\n", []string{"controlPlane.bindingTimeout: Invalid value", "5s to 10m"}},
		{"NVML with a profile", head + "nodes: [{name: a, gpus: {nvml: host, profile: l4-24gb, count: 1}}]\n", []string{"nodes[0].gpus.nvml", "not both"}},
		{"outside driver without command", head + "driver: {name: gpu.example.com}\nnodes: [{name: a}]\n", []string{"driver.command: Required"}},
		{"outside driver placeholder", head + "driver: {name: gpu.example.com, command: [plugin, '--node={node}']}\nnodes: [{name: a}]\n", []string{"driver.command[1]", `"{node}"`, "{nodeName}"}},
		{"outside driver env placeholder", head + "driver: {name: gpu.example.com, command: [plugin], env: {NODE_NAME: '{node}'}}\nnodes: [{name: a}]\n", []string{"driver.env[NODE_NAME]", `"{node}"`, "{nodeName}"}},
		{"outside driver port placeholder", head + "driver: {name: gpu.example.com, command: [plugin, '--metrics=:{port:}']}\nnodes: [{name: a}]\n", []string{"driver.command[1]", "{port:<name>}"}},
		{"outside driver port name", head + "driver: {name: gpu.example.com, command: [plugin, '--metrics=:{port:Metrics}']}\nnodes: [{name: a}]\n", []string{"driver.command[1]", "lower case"}},
		{"outside driver and GPUs", head + "driver: {name: gpu.example.com, command: [plugin]}\nnodes: [{name: a, gpus: {profile: l4-24gb, count: 1}}]\n", []string{"nodes[0].gpus: Forbidden"}},
		{"outside driver manifest", head + "driver: {name: gpu.example.com, command: [plugin], manifests: [nowhere.yaml]}\nnodes: [{name: a}]\n", []string{"driver.manifests[0]", "nowhere.yaml"}},
		{"duplicate key", head + "name: a\nname: b\nnodes: [{name: a}]\n", []string{`key "name" already set`}},
		{"unknown partitioning", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, partitioning: mps}}]\n", []string{"nodes[0].gpus.partitioning", `"mps"`, `"mig"`}},
		{"unknown sharing", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, sharing: time}}]\n", []string{"nodes[0].gpus.sharing", `"time"`, `"memory"`}},
		{"partitioned and shared", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, partitioning: mig, sharing: memory}}]\n", []string{"nodes[0].gpus.sharing: Forbidden", "partitioned or shared, not both"}},
		{"partitioned counting", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, partitioning: mig, mode: device-plugin}}]\n", []string{"nodes[0].gpus.partitioning: Forbidden", "need mode dra"}},
		{"shared NVML", head + "nodes: [{name: a, gpus: {nvml: host, sharing: memory}}]\n", []string{"nodes[0].gpus.sharing: Forbidden", "only fake GPUs"}},
		{"partitioned on kind", head + "backend: kind\nnodes: [{name: a, gpus: {profile: h100-80gb, count: 1, partitioning: mig}}]\n", []string{"nodes[0].gpus: Forbidden", "embedded backend only"}},
		{"unknown attach", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, attach: cxl}}]\n", []string{"nodes[0].gpus.attach", `"cxl"`, `"fabric"`}},
		{"attached NVML", head + "nodes: [{name: a, gpus: {nvml: host, attach: fabric}}]\n", []string{"nodes[0].gpus.attach: Forbidden", "only fake GPUs"}},
		{"attached counting", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, attach: fabric, mode: device-plugin}}]\n", []string{"nodes[0].gpus.attach: Forbidden", "needs mode dra"}},
		{"attached and partitioned", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, attach: fabric, partitioning: mig}}]\n", []string{"nodes[0].gpus.attach: Forbidden", "attached whole"}},
		{"attached on kind", head + "backend: kind\nnodes: [{name: a, gpus: {profile: h100-80gb, count: 1, attach: fabric}}]\n", []string{"nodes[0].gpus.attach: Forbidden", "embedded backend only"}},
		{"time slices out of range", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, timeSlices: 17}}]\n", []string{"nodes[0].gpus.timeSlices", "17", "between 1 and 16"}},
		{"time-sliced NVML", head + "nodes: [{name: a, gpus: {nvml: host, timeSlices: 2}}]\n", []string{"nodes[0].gpus.timeSlices: Forbidden", "only fake GPUs"}},
		{"time-sliced and shared", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, sharing: memory, timeSlices: 2}}]\n", []string{"nodes[0].gpus.timeSlices: Forbidden", "give sharing or timeSlices"}},
		{"time slices beside MIG without the gate", head + "nodes: [{name: a, gpus: {profile: a100-80gb, count: 1, partitioning: mig, timeSlices: 4}}]\n", []string{"nodes[0].gpus.timeSlices: Forbidden", "DRADeviceCompatibilityGroups: true"}},
		{"attach delay without attach", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, attachDelay: 2s}}]\n", []string{"nodes[0].gpus.attachDelay: Forbidden", "attach: fabric"}},
		{"attach delay not a duration", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, attach: fabric, attachDelay: soon}}]\n", []string{"nodes[0].gpus.attachDelay", `"soon"`, "duration"}},
		{"attach delay too long", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, attach: fabric, attachDelay: 11m}}]\n", []string{"nodes[0].gpus.attachDelay", `"11m"`, "between 0s and 5m0s"}},
		{"null nodes", head + "nodes:\n", []string{"nodes: Required", "nodes: []"}},
		{"kind without nodes", head + "backend: kind\nnodes: []\n", []string{"nodes: Required", "kind lab needs at least one node"}},
		{"control plane on kind", head + "backend: kind\ncontrolPlane: {parallelism: 4}\nnodes: [{name: a}]\n", []string{"controlPlane: Forbidden"}},
		{"negative parallelism", head + "controlPlane: {parallelism: -1}\nnodes: []\n", []string{"controlPlane.parallelism", "between 1 and 1024"}},
		{"zero percentage of nodes", head + "controlPlane: {percentageOfNodesToScore: 0}\nnodes: []\n", []string{"controlPlane.percentageOfNodesToScore", "between 1 and 100"}},
		{"misspelt control plane field", head + "controlPlane: {paralelism: 4}\nnodes: []\n", []string{`unknown field "controlPlane.paralelism"`}},
		{"label of Kubernetes' domain", head + "nodes: [{name: a, labels: {topology.kubernetes.io/rack: r1}}]\n", []string{"nodes[0].labels[topology.kubernetes.io/rack]", "NodeRestriction"}},
		{"zero NICs", head + "nodes: [{name: a, nics: {profile: cx7-400g, count: 0}}]\n", []string{"nodes[0].nics.count", "between 1 and 64"}},
		{"NICs without profile", head + "nodes: [{name: a, nics: {count: 2}}]\n", []string{"nodes[0].nics.profile: Required"}},
		{"misspelt NIC field", head + "nodes: [{name: a, nics: {profile: cx7-400g, cuont: 2}}]\n", []string{`unknown field "nodes[0].nics.cuont"`}},
		{"NICs that skip node operations on kind", head + "backend: kind\nfeatureGates: {DRAOptionalNodeOperations: true}\nnodes: [{name: a, nics: {profile: x710-10g, count: 2, skipNodeOperations: true}}]\n", []string{"nodes[0].nics: Forbidden", "embedded backend only"}},
		{"outside driver and NICs", head + "driver: {name: gpu.example.com, command: [plugin]}\nnodes: [{name: a, nics: {profile: cx7-400g, count: 1}}]\n", []string{"nodes[0].nics: Forbidden"}},
		{"skipped node operations without the gate", head + "nodes: [{name: a, nics: {profile: x710-10g, count: 2, skipNodeOperations: true}}]\n", []string{"nodes[0].nics.skipNodeOperations", "DRAOptionalNodeOperations: true"}},
		{"NUMA lists without the gate", head + "nodes: [{name: a, nics: {profile: cx7-sd-400g, count: 1, numaNodeList: true}}]\n", []string{"nodes[0].nics.numaNodeList", "DRAListTypeAttributes: true"}},
		{"too little memory", head + "nodes: [{name: a, memory: 512Mi}]\n", []string{"nodes[0].memory", "512Mi", "between 1Gi and 64Ti"}},
		{"memory not a quantity", head + "nodes: [{name: a, memory: lots}]\n", []string{"nodes[0].memory"}},
		{"memory of a real node", head + "nodes: [{name: a, kind: real, memory: 64Gi}]\n", []string{"nodes[0].memory: Forbidden", "host's memory"}},
		{"memory of a kind node", head + "backend: kind\nnodes: [{name: a, memory: 64Gi}]\n", []string{"nodes[0].memory: Forbidden"}},
		{"device metadata of counted GPUs", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, mode: device-plugin, deviceMetadata: true}}]\n", []string{"nodes[0].gpus.deviceMetadata: Forbidden", "extended resource"}},
		{"device metadata on kind", head + "backend: kind\nnodes: [{name: a, gpus: {profile: l4-24gb, count: 1, deviceMetadata: true}}]\n", []string{"nodes[0].gpus.deviceMetadata: Forbidden", "embedded backend only"}},
		{"CPUs without the gate", head + "nodes: [{name: a, cpus: {complexes: 4, cpusPerComplex: 16}}]\n", []string{"nodes[0].cpus: Forbidden", "DRANodeAllocatableResources: true"}},
		{"no complexes", head + "featureGates: {DRANodeAllocatableResources: true}\nnodes: [{name: a, cpus: {complexes: 0, cpusPerComplex: 16}}]\n", []string{"nodes[0].cpus.complexes", "between 1 and 64"}},
		{"misspelt CPU field", head + "nodes: [{name: a, cpus: {complexes: 4, cpuPerComplex: 16}}]\n", []string{`unknown field "nodes[0].cpus.cpuPerComplex"`}},
		{"CPUs of a real node", head + "featureGates: {DRANodeAllocatableResources: true}\nnodes: [{name: a, kind: real, cpus: {complexes: 4, cpusPerComplex: 16}}]\n", []string{"nodes[0].cpus: Forbidden", "host's CPUs"}},
		{"empty topology", head + "nodes: [{name: a, topology: {}}]\n", []string{"nodes[0].topology: Required", "rack, an nvlinkDomain"}},
		{"bad rack", head + "nodes: [{name: a, topology: {rack: 'rack 1'}}]\n", []string{"nodes[0].topology.rack", `"rack 1"`, "topology.dralab.dev/rack"}},
		{"misspelt topology field", head + "nodes: [{name: a, topology: {nvlinkdomain: nvl-1}}]\n", []string{`unknown field "nodes[0].topology.nvlinkdomain"`}},
		{"topology against a label", head + "nodes: [{name: a, labels: {topology.dralab.dev/nvlink-domain: nvl-2}, topology: {nvlinkDomain: nvl-1}}]\n", []string{"nodes[0].topology.nvlinkDomain", "labels sets topology.dralab.dev/nvlink-domain=nvl-2 too"}},
		{"misspelt gate", head + "featureGates: {GenricWorkload: true}\nnodes: []\n", []string{"featureGates[GenricWorkload]", "no such feature gate", "did you mean GenericWorkload?"}},
		{"gate in the wrong case", head + "featureGates: {genericworkload: true}\nnodes: []\n", []string{"featureGates[genericworkload]", "did you mean GenericWorkload?"}},
		{"made-up gate", head + "featureGates: {Teleportation: true}\nnodes: []\n", []string{"featureGates[Teleportation]", "v1.37.2 has no such feature gate"}},
		{"locked gate", head + "featureGates: {DRAPrioritizedList: false}\nnodes: []\n", []string{"featureGates[DRAPrioritizedList]", "GA and locked to true"}},
		{"gate without its dependency", head + "featureGates: {DRAWorkloadResourceClaims: true}\nnodes: []\n", []string{"featureGates[DRAWorkloadResourceClaims]", "needs GenericWorkload", "GenericWorkload: true"}},
		{"gate not a bool", head + "featureGates: {GenericWorkload: yes please}\nnodes: []\n", []string{"featureGates"}},
		{"misspelt API version", head + "runtimeConfig: {scheduling.k8s.io/v1beta: 'true'}\nnodes: []\n", []string{"runtimeConfig[scheduling.k8s.io/v1beta]", "no such API version", "did you mean scheduling.k8s.io/v1beta1?"}},
		{"runtime config not true or false", head + "runtimeConfig: {scheduling.k8s.io/v1beta1: 'on'}\nnodes: []\n", []string{"runtimeConfig[scheduling.k8s.io/v1beta1]", `"on"`, `"true"`}},
		{"CPUs on kind", head + "backend: kind\nfeatureGates: {DRANodeAllocatableResources: true}\nnodes: [{name: a, cpus: {complexes: 4, cpusPerComplex: 16}}]\n", []string{"nodes[0].cpus: Forbidden", "embedded backend only"}},
		{"memory on kind", head + "backend: kind\nnodes: [{name: a, memory: 64Gi}]\n", []string{"nodes[0].memory: Forbidden", "container's memory"}},
		{"node image on the embedded lab", head + "nodeImage: kindest/node:v1.37.2\nnodes: [{name: a}]\n", []string{"nodeImage: Forbidden", "embedded lab runs the Kubernetes it is built with"}},
		{"node image not an image", head + "backend: kind\nnodeImage: 'kindest/node v1'\nnodes: [{name: a}]\n", []string{"nodeImage: Invalid", "an image reference"}},
		{"misspelt partitioning", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, partitionning: mig}}]\n", []string{`unknown field "nodes[0].gpus.partitionning"`}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("my-lab.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range append(c.want, "my-lab.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestHashChangesWithContent(t *testing.T) {
	a, b := Default(), Default()
	if a.Hash() != b.Hash() {
		t.Fatal("equal configs hash differently")
	}
	b.Nodes[0].GPUs.Count++
	if a.Hash() == b.Hash() {
		t.Fatal("different configs hash the same")
	}
}

func TestOutsideDriver(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "classes.yaml"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "lab.yaml")
	data := "apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a}, {name: b}]\n" +
		"driver: {name: gpu.example.com, command: [./bin/plugin, '--node={nodeName}', '--cdi={cdiDir}', '--x={nodeName}-{stateDir}', '--metrics=127.0.0.1:{port:metrics}'], " +
		"env: {NODE_NAME: '{nodeName}', HEALTH: ':{port:health}', PLAIN: 'x'}, manifests: [classes.yaml]}\n"
	if err := os.WriteFile(file, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Driver
	if d.Command[0] != filepath.Join(dir, "bin/plugin") || d.Manifests[0] != filepath.Join(dir, "classes.yaml") {
		t.Errorf("paths not resolved against the file: %v %v", d.Command, d.Manifests)
	}
	if ports := d.PortNames(); strings.Join(ports, ",") != "health,metrics" {
		t.Errorf("PortNames = %v, want health, metrics", ports)
	}
	got, env := d.Expand(map[string]string{"{nodeName}": "a", "{cdiDir}": "/cdi", "{stateDir}": "/s",
		PortPlaceholder("metrics"): "4001", PortPlaceholder("health"): "4002"})
	want := []string{d.Command[0], "--node=a", "--cdi=/cdi", "--x=a-/s", "--metrics=127.0.0.1:4001"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Expand = %v, want %v", got, want)
	}
	if env["NODE_NAME"] != "a" || env["HEALTH"] != ":4002" || env["PLAIN"] != "x" || len(env) != 3 {
		t.Errorf("Expand's env = %v, want NODE_NAME=a HEALTH=:4002 PLAIN=x", env)
	}
}

func TestNVMLNodes(t *testing.T) {
	cfg, err := Parse("nvml.yaml", []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a, gpus: {nvml: 'mock:mixed'}}, {name: b, gpus: {nvml: host}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Nodes[0].GPUs; g.NVML != "mock:mixed" || g.Mode != GPUModeDRA || g.Count != 0 {
		t.Errorf("NVML node = %+v", g)
	}
}

func TestPartitionedAndSharedNodes(t *testing.T) {
	cfg, err := Parse("split.yaml", []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a, gpus: {profile: h100-80gb, count: 1, partitioning: mig}}, {name: b, gpus: {profile: l4-24gb, count: 1, sharing: memory}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if g := cfg.Nodes[0].GPUs; g.Partitioning != "mig" || g.Sharing != "" || g.Mode != GPUModeDRA {
		t.Errorf("partitioned node = %+v", g)
	}
	if g := cfg.Nodes[1].GPUs; g.Sharing != "memory" || g.Partitioning != "" {
		t.Errorf("shared node = %+v", g)
	}
}

func TestFabricAttachedNodes(t *testing.T) {
	cfg, err := Parse("fabric.yaml", []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a, gpus: {profile: h100-80gb, count: 2, attach: fabric}}, {name: b, gpus: {profile: h100-80gb, count: 1, attach: fabric, attachDelay: 500ms}}, {name: c, gpus: {profile: l4-24gb, count: 1}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{DefaultAttachDelay, 500 * time.Millisecond} {
		if g := cfg.Nodes[i].GPUs; g.Attach != "fabric" || g.Mode != GPUModeDRA || g.AttachDuration() != want {
			t.Errorf("node %s = %+v, attach delay %v, want fabric after %v", cfg.Nodes[i].Name, g, g.AttachDuration(), want)
		}
	}
	if g := cfg.Nodes[2].GPUs; g.Attach != "" {
		t.Errorf("node c = %+v, want no attach", g)
	}
}

// catalog is a GPU driver's names, as the lab's is.
type catalog struct{ profiles, mig, mocks, nics []string }

func (c catalog) Profiles() []string    { return c.profiles }
func (c catalog) MIGProfiles() []string { return c.mig }
func (c catalog) NVMLMocks() []string   { return c.mocks }
func (c catalog) NICProfiles() []string { return c.nics }

// The names only the driver knows are checked against its catalog, after
// Parse: errors name the file and the field, and list what there is.
func TestCheckGPUs(t *testing.T) {
	const head = "apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\n"
	cat := catalog{profiles: []string{"h100-80gb", "l4-24gb"}, mig: []string{"h100-80gb"}, mocks: []string{"dgxh100", "mixed"}, nics: []string{"cx7-400g", "e810-100g"}}
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"unknown profile", head + "nodes: [{name: a, gpus: {profile: h200-141gb, count: 1}}]\n", []string{"nodes[0].gpus.profile", `"h200-141gb"`, "h100-80gb", "l4-24gb"}},
		{"unknown NVML mock", head + "nodes: [{name: a, gpus: {nvml: 'mock:dgx1'}}]\n", []string{"nodes[0].gpus.nvml", `"mock:dgx1"`, "mock:dgxh100"}},
		{"MIG without geometry", head + "nodes: [{name: a, gpus: {profile: l4-24gb, count: 1, partitioning: mig}}]\n", []string{"nodes[0].gpus.partitioning", "GPU profile l4-24gb has no MIG geometry", "h100-80gb"}},
		{"several at once", head + "nodes: [{name: a, gpus: {profile: x, count: 1}}, {name: b, gpus: {nvml: 'mock:y'}}]\n", []string{"nodes[0].gpus.profile", "nodes[1].gpus.nvml", `"mock:y"`}},
		{"unknown fabric profile", head + "nodes: [{name: a}]\nfabric: [{name: e, profile: b200, count: 1, allNodes: true}]\n", []string{"fabric[0].profile", `"b200"`, "h100-80gb"}},
		{"unknown NIC profile", head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 8}, nics: {profile: cx9-800g, count: 8}}]\n", []string{"nodes[0].nics.profile", `"cx9-800g"`, "cx7-400g", "e810-100g"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := Parse("my-lab.yaml", []byte(c.yaml))
			if err != nil {
				t.Fatalf("Parse: %v; the names are the catalog's to check", err)
			}
			err = cfg.CheckGPUs(cat)
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("CheckGPUs = %v, want ErrInvalid", err)
			}
			for _, w := range append(c.want, "my-lab.yaml") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
	for _, ok := range []string{
		head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 1, partitioning: mig}}, {name: b, gpus: {nvml: 'mock:mixed'}}, {name: c, gpus: {nvml: host}}, {name: d}]\n",
		head + "nodes: [{name: a, gpus: {profile: h100-80gb, count: 8}, nics: {profile: cx7-400g, count: 8}}, {name: b, nics: {profile: e810-100g, count: 2}}]\n",
	} {
		cfg, err := Parse("ok.yaml", []byte(ok))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.CheckGPUs(cat); err != nil {
			t.Errorf("CheckGPUs of known names = %v", err)
		}
	}
	inCode := &Config{Nodes: []Node{{Name: "a", GPUs: &GPUs{Profile: "x", Count: 1}}}}
	if err := inCode.CheckGPUs(cat); err == nil || !strings.Contains(err.Error(), "(built in code)") {
		t.Errorf("a configuration built in code: %v, want its names checked and it named as built in code", err)
	}
}

// Gates and API versions a configuration may switch, and what the
// components are given.
func TestFeatureGatesAndRuntimeConfig(t *testing.T) {
	cfg := example(t, "workloads.yaml")
	if got, want := cfg.FeatureGatesFlag(), "DRAWorkloadResourceClaims=true,GenericWorkload=true,PodGroupPreemptionPolicy=true,TopologyAwareWorkloadScheduling=true"; got != want {
		t.Errorf("FeatureGatesFlag = %q, want %q", got, want)
	}
	if got := cfg.RuntimeConfigFlag(); got != "scheduling.k8s.io/v1beta1=true" {
		t.Errorf("RuntimeConfigFlag = %q", got)
	}
	if !cfg.GateEnabled("GenericWorkload") || !cfg.GateEnabled("DynamicResourceAllocation") || cfg.GateEnabled("DRAListTypeAttributes") {
		t.Errorf("GateEnabled: set, default-on and default-off gates misread")
	}
	def := Default()
	if def.FeatureGatesFlag() != "" || def.RuntimeConfigFlag() != "" {
		t.Errorf("the default lab switches %q %q", def.FeatureGatesFlag(), def.RuntimeConfigFlag())
	}
	// Resources and the api/ groups are keys too; a locked gate may be
	// named at its default.
	ok := "apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: []\nfeatureGates: {DRAPrioritizedList: true, AllAlpha: false}\n" +
		"runtimeConfig: {api/alpha: 'false', resource.k8s.io/v1alpha3/resourcepoolstatusrequests: 'true', api/v1: 'true'}\n"
	if _, err := Parse("ok.yaml", []byte(ok)); err != nil {
		t.Errorf("valid gates and runtime config refused: %v", err)
	}
}

// A node's topology becomes its labels; the workloads lab places its H100
// servers in two NVLink domains.
func TestTopologyLabels(t *testing.T) {
	cfg := example(t, "workloads.yaml")
	domains := map[string]int{}
	for _, n := range cfg.Nodes {
		if n.GPUs != nil && n.GPUs.Profile == "h100-80gb" && n.Topology != nil {
			domains[n.Topology.Labels()[LabelNVLinkDomain]] += n.GPUs.Count
		}
	}
	if len(domains) != 2 || domains["nvl-1"] != 16 || domains["nvl-2"] != 16 {
		t.Errorf("H100s per NVLink domain = %v, want two domains of 16", domains)
	}
	got := (&Topology{Rack: "r1", NVLinkDomain: "nvl-1"}).Labels()
	if len(got) != 2 || got[LabelRack] != "r1" || got[LabelNVLinkDomain] != "nvl-1" {
		t.Errorf("Labels = %v", got)
	}
	if got := (*Topology)(nil).Labels(); len(got) != 0 {
		t.Errorf("no topology has labels %v", got)
	}
}

// example parses an example lab configuration.
func example(t *testing.T, file string) *Config {
	t.Helper()
	cfg, err := Example(file)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// A real node carries NICs: its containers get real interfaces (the NIC
// driver's createRuntime hook), so the lab no longer refuses them there;
// and kind nodes do (the chart's NIC release).
func TestRealNodeWithNICs(t *testing.T) {
	if _, err := Parse("lab.yaml", []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nbackend: kind\nnodes: [{name: a, nics: {profile: cx7-400g, count: 2}}]\n")); err != nil {
		t.Errorf("NICs on kind: %v", err)
	}
	cfg, err := Parse("lab.yaml", []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a, kind: real, nics: {profile: cx6dx-100g, count: 2}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := cfg.Nodes[0]; n.Kind != NodeReal || n.NICs == nil || n.NICs.Count != 2 {
		t.Errorf("node %+v, want a real node with two NICs", n)
	}
}

// Every limit is a backend's, names a field and says why; the default lab
// meets its backend's.
func TestBackendLimitsAreKinds(t *testing.T) {
	for _, l := range allLimits() {
		if (l.backend != BackendKind && l.backend != BackendEmbedded) || len(l.field) == 0 || l.why == "" || (l.lab == nil) == (l.node == nil) {
			t.Errorf("limit %+v: want a backend's, a field, a reason and one of lab or node", l)
		}
	}
	embedded := Default()
	if errs := embedded.labLimits(); len(errs) > 0 {
		t.Errorf("the default embedded lab has backend limits: %v", errs)
	}
}

// A node's taints, as its kubelet's flag and the API take them.
func TestNodeTaints(t *testing.T) {
	cfg, err := Parse("lab.yaml", []byte("apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes:\n- name: a\n  taints: [{key: nvidia.com/gpu, value: present, effect: NoSchedule}, {key: dedicated, effect: NoExecute}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := cfg.Nodes[0]
	if got, want := strings.Join(n.TaintStrings(), ","), "nvidia.com/gpu=present:NoSchedule,dedicated:NoExecute"; got != want {
		t.Errorf("taints %q, want %q", got, want)
	}
	if got := n.NodeTaints(); len(got) != 2 || got[1] != (v1.Taint{Key: "dedicated", Effect: v1.TaintEffectNoExecute}) {
		t.Errorf("API taints %+v", got)
	}
}
