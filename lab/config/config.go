// Package config defines the lab configuration file: which backend runs the
// lab, and which nodes it has with which GPUs. The file is versioned and
// decoded strictly: an unknown or misspelt field is an error naming the file
// and the field, never silently ignored.
package config

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/strictyaml"
	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/lab/examples"
)

const (
	// APIVersion is the only version of the lab configuration so far.
	APIVersion = "lab.dralab.dev/v1alpha1"
	// Kind is the kind of a lab configuration document.
	Kind = "Lab"
	// DefaultName names a lab whose configuration names none.
	DefaultName = "dralab"
)

// Backends.
const (
	BackendEmbedded = "embedded"
	BackendKind     = "kind"
)

// LabelLabNode names, on a cluster node whose name is not the lab node's
// (kind chooses its workers' names), the lab node it stands for.
const LabelLabNode = "dralab.dev/lab-node"

// KindNodeImage is the default node image of a kind lab: kind's published
// image nearest the Kubernetes every lab runs (v1.37.0 for the lab's
// v1.37.2: kind publishes no v1.37.2 image), pinned by the digest of kind
// v0.33.0's release notes (containerd 2 inside, CDI on by default). A
// lab's nodeImage, or $DRALAB_KIND_NODE_IMAGE, names another, such as an
// image of the lab's own Kubernetes.
const KindNodeImage = "kindest/node:v1.37.0@sha256:a1ed56cfb0e7b93589bdf97c8cd566405a265939e3620fc4f5de89adff580ae5"

// Node kinds.
const (
	// NodeHollow is the real kubelet with a fake container runtime: cheap,
	// many per host.
	NodeHollow = "hollow"
	// NodeReal is the real kubelet with containerd and runc: one per host.
	NodeReal = "real"
)

// Config is a lab configuration document.
type Config struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name identifies the lab; its state lives in a folder of that name.
	Name string `json:"name,omitempty"`
	// Backend is "embedded" (the default) or "kind".
	Backend string `json:"backend,omitempty"`
	// NodeImage is a kind lab's node image (KindNodeImage unless set):
	// one of kind's, or one built for the lab.
	NodeImage string `json:"nodeImage,omitempty"`
	// APIServerPort is the loopback port of the API server; 0 picks a free one.
	APIServerPort int `json:"apiServerPort,omitempty"`
	// Nodes are the lab's nodes, in order. An explicit empty list
	// (nodes: []) makes a control plane without nodes, on the embedded
	// backend: what the scale bench adds its virtual nodes to.
	Nodes []Node `json:"nodes"`
	// ControlPlane tunes the embedded control plane's scheduler and
	// controller manager; every field has a default.
	ControlPlane *ControlPlane `json:"controlPlane,omitempty"`
	// FeatureGates switches Kubernetes feature gates, as kind's Cluster
	// does: every component that reads them (API server, scheduler,
	// controller manager, every kubelet) gets the same. Names are checked
	// against Kubernetes v1.37.2's gates, with their locks and
	// dependencies.
	FeatureGates map[string]bool `json:"featureGates,omitempty"`
	// RuntimeConfig switches API versions (or resources) on or off in the
	// API server, as kind's Cluster does: {"scheduling.k8s.io/v1beta1":
	// "true"}.
	RuntimeConfig map[string]string `json:"runtimeConfig,omitempty"`
	// Driver runs an outside DRA driver's kubelet plugin on every node
	// instead of dralab's GPU driver: a driver author's cluster for the
	// conformance suite, without Docker.
	Driver *Driver `json:"driver,omitempty"`
	// Fabric are enclosures of network-attached GPUs that several nodes
	// reach (embedded backend): published once for all of them, with a
	// node selector, all nodes, or per-device node selection.
	Fabric []FabricPool `json:"fabric,omitempty"`

	// source is the file the configuration was read from.
	source string
}

// ControlPlane holds the settings of the embedded control plane that
// bear on scheduling throughput (docs/performance.md measures each).
type ControlPlane struct {
	// ClientQPS is the client QPS and burst of the scheduler and the
	// controller manager (default 1000; upstream's 20/30 caps claim
	// creation from templates at about 10 pods/s).
	ClientQPS int32 `json:"clientQPS,omitempty"`
	// PercentageOfNodesToScore is the share of a cluster's nodes the
	// scheduler finds feasible before it stops filtering and scores them
	// (1–100; it always looks for at least 100 nodes, so labs of 100 nodes
	// or fewer filter every node). Default 10: upstream's adaptive default
	// (46 % of 500 nodes) runs the DRA allocator on 2.3 times as many
	// nodes, which cost 40 % of the throughput of firstAvailable pods at
	// 500 nodes (docs/performance.md).
	PercentageOfNodesToScore *int32 `json:"percentageOfNodesToScore,omitempty"`
	// Parallelism is how many nodes the scheduler filters and scores at
	// once (default: the machine's CPUs, at least 2 and at most upstream's
	// 16; more goroutines than cores only add overhead).
	Parallelism int32 `json:"parallelism,omitempty"`
	// GCPercent is the lab process's Go garbage collector target (GOGC;
	// default 100, Go's): 200 schedules about a quarter faster at 500
	// nodes for about twice the peak memory.
	GCPercent int32 `json:"gcPercent,omitempty"`
	// DynamicResourcesWeight weights the DynamicResources score, which
	// prefers nodes where a prioritized list's earlier alternative fits
	// (default 20; upstream's 2 lets other scores outweigh it).
	DynamicResourcesWeight int32 `json:"dynamicResourcesWeight,omitempty"`
	// ClaimWorkers is the controller manager's resource claim controller
	// workers, which create claims from templates (default 50, as upstream).
	ClaimWorkers int32 `json:"claimWorkers,omitempty"`
	// BindingTimeout is how long the scheduler waits for a device's
	// binding conditions before it gives the allocation up (its
	// DynamicResources plugin's bindingTimeout; default 10m, upstream's):
	// a Go duration, 5s to 10m.
	BindingTimeout string `json:"bindingTimeout,omitempty"`
}

// Control plane defaults.
const (
	DefaultClientQPS                = 1000
	DefaultPercentageOfNodesToScore = 10
	DefaultDynamicResourcesWeight   = 20
	DefaultClaimWorkers             = 50
)

// Settings returns the control plane's settings with defaults filled in
// (a nil ControlPlane is every default).
func (cp *ControlPlane) Settings() ControlPlane {
	var s ControlPlane
	if cp != nil {
		s = *cp
	}
	if s.ClientQPS == 0 {
		s.ClientQPS = DefaultClientQPS
	}
	if s.PercentageOfNodesToScore == nil {
		s.PercentageOfNodesToScore = ptr.To[int32](DefaultPercentageOfNodesToScore)
	}
	if s.Parallelism == 0 {
		s.Parallelism = int32(max(2, min(16, runtime.NumCPU())))
	}
	if s.DynamicResourcesWeight == 0 {
		s.DynamicResourcesWeight = DefaultDynamicResourcesWeight
	}
	if s.ClaimWorkers == 0 {
		s.ClaimWorkers = DefaultClaimWorkers
	}
	return s
}

// Node is one lab node.
type Node struct {
	// Name is the Kubernetes node name.
	Name string `json:"name"`
	// Kind is "hollow" (the default) or "real".
	Kind string `json:"kind,omitempty"`
	// Labels are added to the node's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// Taints are the node's taints, registered by its kubelet: a GPU node
	// pool's NoSchedule taint, as GKE's (nvidia.com/gpu=present) and AKS's
	// (sku=gpu) are. Pods without a toleration stay off the node.
	Taints []Taint `json:"taints,omitempty"`
	// Topology places the node in a rack and an NVLink domain: node labels
	// that a PodGroup's topology constraint names, and the same values as
	// attributes of the node's GPUs, for a claim's matchAttribute.
	Topology *Topology `json:"topology,omitempty"`
	// GPUs are the devices the node's GPU driver publishes; none for a CPU-only node.
	GPUs *GPUs `json:"gpus,omitempty"`
	// NICs are the network adapters the node's NIC driver (nic.dralab.dev)
	// publishes: NIC i under the PCIe root of GPU i (docs/gpu-nic.md).
	NICs *NICs `json:"nics,omitempty"`
	// Memory is a hollow node's memory, e.g. 64Gi: what its kubelet
	// reports as capacity (less nothing reserved, as allocatable). Unset,
	// a hollow node has kubemark's 3840Mi. A real node reports its host's.
	// Where the DRANodeAllocatableResources gate is on, the fake GPUs of a
	// node with memory (or of a real node) publish their host memory
	// overhead (HostMemoryOverhead).
	Memory string `json:"memory,omitempty"`
	// CPUs are the node's CPUs as core complexes, published by the CPU
	// driver (cpu.dralab.dev), each mapped to the node's cpu: a hollow
	// node's logical CPUs become complexes × cpusPerComplex. Needs the
	// DRANodeAllocatableResources gate.
	CPUs *CPUs `json:"cpus,omitempty"`
}

// A deviceSection is a node's section for one kind of device (gpus, nics,
// cpus). Its file declares it with its validation and the backends'
// limits on it; Node.deviceSections lists it.
type deviceSection interface {
	// isSet tells whether the node has the section.
	isSet() bool
	// validate checks the section, set, on node n (at p) of lab c;
	// limited are the node's fields that the backend's limits reported,
	// whose own checks it leaves out.
	validate(c *Config, n *Node, p *field.Path, limited sets.Set[string]) field.ErrorList
	// limits are the backends' limits on the section.
	limits() []backendLimit
}

// deviceSections are node n's sections of device kinds, set or not, in
// the order they are validated.
func (n *Node) deviceSections() []deviceSection {
	return []deviceSection{n.CPUs, n.NICs, n.GPUs}
}

// MemoryBytes is a hollow node's memory in bytes; 0 where memory is unset
// (or invalid, which Validate refuses).
func (n *Node) MemoryBytes() int64 {
	q, err := resource.ParseQuantity(n.Memory)
	if err != nil {
		return 0
	}
	return q.Value()
}

// LogicalCPUs is a hollow node's logical CPUs, its CPU complexes' together;
// 0 where it has none (the hollow kubelet's default).
func (n *Node) LogicalCPUs() int {
	if n.CPUs == nil {
		return 0
	}
	return n.CPUs.Complexes * n.CPUs.CPUsPerComplex
}

// MinNodeMemory and MaxNodeMemory bound a hollow node's memory.
var (
	MinNodeMemory = resource.MustParse("1Gi")
	MaxNodeMemory = resource.MustParse("64Ti")
)

// Topology is where a node sits. Each place becomes a node label and an
// attribute of every GPU of the node (docs/workloads.md):
//
//	field         node label                         GPU attribute
//	rack          topology.dralab.dev/rack           topology.dralab.dev/rack
//	nvlinkDomain  topology.dralab.dev/nvlink-domain  topology.dralab.dev/nvlinkDomain
type Topology struct {
	Rack         string `json:"rack,omitempty"`
	NVLinkDomain string `json:"nvlinkDomain,omitempty"`
}

// The node labels of a node's topology; the GPU driver spells them the
// same (lab's tests check).
const (
	LabelRack         = "topology.dralab.dev/rack"
	LabelNVLinkDomain = "topology.dralab.dev/nvlink-domain"
)

// Labels are the node labels of the topology.
func (t *Topology) Labels() map[string]string {
	out := map[string]string{}
	if t == nil {
		return out
	}
	if t.Rack != "" {
		out[LabelRack] = t.Rack
	}
	if t.NVLinkDomain != "" {
		out[LabelNVLinkDomain] = t.NVLinkDomain
	}
	return out
}

// Default returns the default lab: one node per GPU tier.
func Default() *Config {
	cfg, err := Example(examples.DefaultFile)
	if err != nil {
		panic(err) // embedded at build time, and validated by tests
	}
	return cfg
}

// Example reads and validates an example lab of lab/examples by its file
// name; its errors name the file by its path in the repository.
func Example(file string) (*Config, error) {
	data, err := examples.FS.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("no example lab %s in lab/examples: %w", file, err)
	}
	return Parse(ExamplePath(file), data)
}

// ExamplePath is the path, from the repository's root, of the example lab
// file: the name its errors give.
func ExamplePath(file string) string { return "lab/examples/" + file }

// Load reads and validates a configuration file. A driver's manifests are
// relative to the file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading lab config: %w", err)
	}
	return parse(path, filepath.Dir(path), data)
}

// ErrInvalid wraps every decoding and validation error.
var ErrInvalid = errors.New("invalid lab config")

// Parse decodes and validates a configuration; source names it in errors.
// A driver's relative manifest paths are relative to the working directory.
func Parse(source string, data []byte) (*Config, error) {
	return parse(source, ".", data)
}

func parse(source, dir string, data []byte) (*Config, error) {
	var cfg Config
	if err := strictyaml.Decode(data, &cfg); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalid, source, err)
	}
	if cfg.Driver != nil {
		// The lab process runs detached, elsewhere: relative paths are the
		// configuration file's.
		if len(cfg.Driver.Command) > 0 && strings.Contains(cfg.Driver.Command[0], "/") && !filepath.IsAbs(cfg.Driver.Command[0]) {
			if abs, err := filepath.Abs(filepath.Join(dir, cfg.Driver.Command[0])); err == nil {
				cfg.Driver.Command[0] = abs
			}
		}
		for i, m := range cfg.Driver.Manifests {
			if !filepath.IsAbs(m) {
				if abs, err := filepath.Abs(filepath.Join(dir, m)); err == nil {
					cfg.Driver.Manifests[i] = abs
				}
			}
		}
	}
	if err := cfg.Complete(); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalid, source, err)
	}
	cfg.source = source
	return &cfg, nil
}

// Record writes the configuration as a lab records it in its state
// directory (JSON, which Load reads back), atomically and private.
func (c *Config) Record(path string) error {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o600)
}

// Complete sets defaults and validates; configurations built in code need
// it, those from Parse and Load have had it.
func (c *Config) Complete() error {
	c.setDefaults()
	if errs := c.validate(); len(errs) > 0 {
		return errs.ToAggregate()
	}
	return nil
}

func (c *Config) setDefaults() {
	if c.Name == "" {
		c.Name = DefaultName
	}
	if c.Backend == "" {
		c.Backend = BackendEmbedded
	}
	if c.Backend == BackendKind && c.NodeImage == "" {
		c.NodeImage = KindNodeImage
	}
	for i := range c.Nodes {
		n := &c.Nodes[i]
		if n.Kind == "" {
			n.Kind = NodeHollow
		}
		if n.GPUs != nil && n.GPUs.Mode == "" {
			n.GPUs.Mode = GPUModeDRA
		}
	}
}

// Source names the configuration in messages: the file it was read from.
func (c *Config) Source() string {
	if c.source == "" {
		return "(built in code)"
	}
	return c.source
}

// Hash identifies a configuration's content: two labs with the same hash are
// interchangeable, so a running lab with the same hash is reused.
func (c *Config) Hash() string {
	data, _ := json.Marshal(c) // a Config always marshals
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:8])
}

// Node returns the named node's configuration.
func (c *Config) Node(name string) (*Node, bool) {
	for i := range c.Nodes {
		if c.Nodes[i].Name == name {
			return &c.Nodes[i], true
		}
	}
	return nil, false
}
