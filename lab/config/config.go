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
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletapis "k8s.io/kubelet/pkg/apis"
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

// KindNodeImage is the node image of a kind lab: kind's for Kubernetes
// 1.37 (containerd 2.3 inside, CDI on by default).
const KindNodeImage = "kindest/node:v1.37.0"

// Node kinds.
const (
	// NodeHollow is the real kubelet with a fake container runtime: cheap,
	// many per host.
	NodeHollow = "hollow"
	// NodeReal is the real kubelet with containerd and runc: one per host.
	NodeReal = "real"
)

// MaxGPUsPerNode bounds a node's GPU count to what real servers carry, with room.
const MaxGPUsPerNode = 64

// Config is a lab configuration document.
type Config struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name identifies the lab; its state lives in a folder of that name.
	Name string `json:"name,omitempty"`
	// Backend is "embedded" (the default) or "kind".
	Backend string `json:"backend,omitempty"`
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
	if v := cp.PercentageOfNodesToScore; v != nil && (*v < 1 || *v > 100) {
		errs = append(errs, field.Invalid(p.Child("percentageOfNodesToScore"), *v, "must be between 1 and 100 (unset: 10)"))
	}
	return errs
}

// Driver is an outside DRA driver's kubelet plugin, run by the lab on every
// node as a host process, restarted when it exits.
type Driver struct {
	// Name is the DRA driver's name.
	Name string `json:"name"`
	// Command is the plugin's command line. Its words may contain the
	// placeholders of Placeholders, filled in per node.
	Command []string `json:"command"`
	// Env is added to the lab's environment for the plugin. Its values
	// may contain the same placeholders as Command.
	Env map[string]string `json:"env,omitempty"`
	// Manifests are YAML files (relative to the configuration file) the lab
	// applies once the control plane is up, e.g. the driver's DeviceClasses.
	Manifests []string `json:"manifests,omitempty"`
}

// Placeholders are what a driver command may contain, and what each becomes
// on a node.
var Placeholders = map[string]string{
	"{nodeName}":     "the node's name",
	"{kubeconfig}":   "a kubeconfig with the node's credentials (the Node authorizer lets it write its own slices)",
	"{registrarDir}": "the kubelet's plugin registration directory",
	"{pluginDir}":    "the driver's own directory under the kubelet's plugins directory, for its DRA socket",
	"{pluginsDir}":   "the kubelet's plugins directory, the parent of {pluginDir}",
	"{cdiDir}":       "the CDI spec directory the node's runtime reads",
	"{stateDir}":     "a directory that survives the plugin's restarts, for its checkpoint",
	"{port:<name>}":  "a free loopback port of that name, one per node: nodes share the host's network namespace, so fixed ports (metrics, health) would collide",
}

// placeholder finds {word} and {port:name} in s.
var placeholder = regexp.MustCompile(`\{[A-Za-z]+(:[a-z0-9-]+)?\}`)

// portPrefix starts a port placeholder, "{port:metrics}".
const portPrefix = "{port:"

// known tells whether ph is a placeholder the lab fills.
func known(ph string) bool {
	if strings.HasPrefix(ph, portPrefix) {
		return true
	}
	_, ok := Placeholders[ph]
	return ok && ph != "{port:<name>}"
}

// Node is one lab node.
type Node struct {
	// Name is the Kubernetes node name.
	Name string `json:"name"`
	// Kind is "hollow" (the default) or "real".
	Kind string `json:"kind,omitempty"`
	// Labels are added to the node's labels.
	Labels map[string]string `json:"labels,omitempty"`
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

// CPUs say how a node's CPUs are grouped: Complexes core complexes (the
// cores that share a level-3 cache) of CPUsPerComplex logical CPUs each,
// e.g. {complexes: 4, cpusPerComplex: 16} for 64 CPUs.
type CPUs struct {
	Complexes      int `json:"complexes"`
	CPUsPerComplex int `json:"cpusPerComplex"`
}

// MaxCPUComplexes and MaxCPUsPerComplex bound a node's cpus, as the CPU
// driver does.
const (
	MaxCPUComplexes   = 64
	MaxCPUsPerComplex = 64
)

// MemoryBytes is a hollow node's memory in bytes; 0 where memory is unset
// (or invalid, which Validate refuses).
func (n *Node) MemoryBytes() int64 {
	q, err := resource.ParseQuantity(n.Memory)
	if err != nil {
		return 0
	}
	return q.Value()
}

// MinNodeMemory and MaxNodeMemory bound a hollow node's memory.
var (
	MinNodeMemory = resource.MustParse("1Gi")
	MaxNodeMemory = resource.MustParse("64Ti")
)

// NICs say what network adapters a node carries: Count fake NICs of a
// Profile, e.g. {profile: cx7-400g, count: 8}.
type NICs struct {
	// Profile names the NIC model, e.g. "cx7-400g".
	Profile string `json:"profile"`
	// Count is the number of NICs.
	Count int `json:"count"`
	// SkipNodeOperations publishes the NICs as needing no work on the
	// node (Kubernetes 1.37's DRAOptionalNodeOperations, alpha: the
	// featureGates must switch it on): the kubelet never asks the NIC
	// driver to prepare their claims.
	SkipNodeOperations bool `json:"skipNodeOperations,omitempty"`
	// NUMANodeList publishes each NIC's resource.kubernetes.io/numaNode as
	// a list (Kubernetes 1.37's DRAListTypeAttributes, alpha: the
	// featureGates must switch it on): its NUMA node and, for a Socket
	// Direct adapter (cx7-sd-400g), the other socket's.
	NUMANodeList bool `json:"numaNodeList,omitempty"`
}

// MaxNICsPerNode bounds a node's NICs, as MaxGPUsPerNode its GPUs.
const MaxNICsPerNode = 64

func (n *NICs) validate(np *field.Path) field.ErrorList {
	var errs field.ErrorList
	if n.Profile == "" {
		errs = append(errs, field.Required(np.Child("profile"), "name a NIC profile, e.g. cx7-400g"))
	}
	if n.Count < 1 || n.Count > MaxNICsPerNode {
		errs = append(errs, field.Invalid(np.Child("count"), n.Count, fmt.Sprintf("must be between 1 and %d", MaxNICsPerNode)))
	}
	return errs
}

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

// GPUs say what GPUs a node carries: Count fake GPUs of a Profile, or
// those NVML reports.
type GPUs struct {
	// Profile names the GPU model of fake GPUs, e.g. "h100-80gb".
	Profile string `json:"profile,omitempty"`
	// Count is the number of fake GPUs.
	Count int `json:"count,omitempty"`
	// NVML takes the GPUs from NVIDIA's management library instead:
	// "host" (this machine's GPUs, through the NVIDIA driver) or
	// "mock:<server>" (go-nvml's mock servers, e.g. mock:dgxh100).
	NVML string `json:"nvml,omitempty"`
	// Mode is how the node's driver serves them: "dra" (the default,
	// ResourceSlices and claims) or "device-plugin" (an extended resource
	// count, the way GPU device plugins work). Never both on one node.
	Mode string `json:"mode,omitempty"`
	// Partitioning "mig" publishes every MIG placement of each fake GPU
	// beside the whole GPU, all drawing from the GPU's counters (a profile
	// with MIG geometry: h100-80gb, a100-80gb, a100-40gb).
	Partitioning string `json:"partitioning,omitempty"`
	// Sharing "memory" lets several claims share each fake GPU, each asking
	// for some of its memory (capacity.requests.memory).
	Sharing string `json:"sharing,omitempty"`
	// TimeSlices offers each fake GPU as this many time-sliced shares too
	// (class time-slice.gpu.dralab.dev), each taking one of the GPU's time
	// slices, the whole GPU all of them. With partitioning: mig the GPU
	// runs MIG devices or shares, whichever a claim gets first: the two
	// declare different compatibility groups, which needs the
	// DRADeviceCompatibilityGroups gate (alpha, off by default).
	TimeSlices int `json:"timeSlices,omitempty"`
	// Attach "fabric" models GPUs in a PCIe/CXL switch, attached to the
	// node on demand: each whole GPU publishes the binding condition
	// dralab.dev/attached (failure: dralab.dev/attach-failed), the
	// scheduler holds a pod in PreBind until the lab's attach controller
	// sets it, and a GPU failed with gpu:fail fails the attachment instead.
	// Whole fake GPUs served through DRA only, on the embedded backend.
	Attach string `json:"attach,omitempty"`
	// AttachDelay is how long attaching a GPU takes, a duration such as
	// "2s" or "500ms" (default 2s, at most 5m: the scheduler gives up on
	// binding conditions after 10 minutes). Only with attach.
	AttachDelay string `json:"attachDelay,omitempty"`
	// DeviceMetadata gives each container of a claim a file of its GPUs'
	// attributes, mounted through CDI at
	// /var/run/kubernetes.io/dra-device-attributes/…/gpu.dralab.dev-metadata.json
	// (device metadata, beta in Kubernetes 1.37, a kubelet-plugin option:
	// no gate). Fake and NVML GPUs served through DRA, on the embedded
	// backend.
	DeviceMetadata bool `json:"deviceMetadata,omitempty"`
}

// DefaultAttachDelay is how long attaching a fabric GPU takes unless
// attachDelay says otherwise.
const DefaultAttachDelay = 2 * time.Second

// MaxAttachDelay bounds attachDelay well below the scheduler's binding
// timeout (600 s), so that an attachment is never given up on for being slow.
const MaxAttachDelay = 5 * time.Minute

// AttachDuration is the node's attach delay: attachDelay, or the default.
// The configuration is validated, so the value parses.
func (g *GPUs) AttachDuration() time.Duration {
	if g == nil || g.AttachDelay == "" {
		return DefaultAttachDelay
	}
	d, err := time.ParseDuration(g.AttachDelay)
	if err != nil {
		return DefaultAttachDelay
	}
	return d
}

// GPU modes.
const (
	GPUModeDRA          = "dra"
	GPUModeDevicePlugin = "device-plugin"
)

// Default returns the default lab: one node per GPU tier.
func Default() *Config {
	data, err := examples.FS.ReadFile(examples.DefaultFile)
	if err != nil {
		panic(err) // embedded at build time
	}
	cfg, err := Parse("lab/examples/"+examples.DefaultFile, data)
	if err != nil {
		panic(err) // the default is validated by tests
	}
	return cfg
}

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
	if c.ControlPlane != nil {
		cpPath := field.NewPath("controlPlane")
		if c.Backend != BackendEmbedded {
			errs = append(errs, field.Forbidden(cpPath, "the embedded backend's control plane only"))
		}
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
		if n.Topology != nil {
			errs = append(errs, n.Topology.validate(p.Child("topology"), n.Labels)...)
		}
		if n.CPUs != nil {
			cp := p.Child("cpus")
			switch {
			case c.Backend == BackendKind:
				errs = append(errs, field.Forbidden(cp, "the CPU driver runs on the embedded backend only, so far"))
			case n.Kind == NodeReal:
				errs = append(errs, field.Forbidden(cp, "a real node has its host's CPUs: cpus sets a hollow node's"))
			case c.Driver != nil:
				errs = append(errs, field.Forbidden(cp, "the lab runs driver.command on every node instead of dralab's drivers"))
			default:
				if n.CPUs.Complexes < 1 || n.CPUs.Complexes > MaxCPUComplexes {
					errs = append(errs, field.Invalid(cp.Child("complexes"), n.CPUs.Complexes, fmt.Sprintf("must be between 1 and %d", MaxCPUComplexes)))
				}
				if n.CPUs.CPUsPerComplex < 1 || n.CPUs.CPUsPerComplex > MaxCPUsPerComplex {
					errs = append(errs, field.Invalid(cp.Child("cpusPerComplex"), n.CPUs.CPUsPerComplex, fmt.Sprintf("must be between 1 and %d", MaxCPUsPerComplex)))
				}
				if !c.GateEnabled(GateNodeAllocatableResources) {
					errs = append(errs, field.Forbidden(cp, "needs featureGates: {"+GateNodeAllocatableResources+": true} (alpha, off by default): each complex maps to the node's cpu, which an API server without the gate drops from the CPU driver's ResourceSlices"))
				}
			}
		}
		if n.Memory != "" {
			m, err := resource.ParseQuantity(n.Memory)
			switch {
			case err != nil:
				errs = append(errs, field.Invalid(p.Child("memory"), n.Memory, "want a quantity such as 64Gi"))
			case c.Backend == BackendKind:
				errs = append(errs, field.Forbidden(p.Child("memory"), "a kind node has its container's memory: memory sets a hollow node's"))
			case n.Kind == NodeReal:
				errs = append(errs, field.Forbidden(p.Child("memory"), "a real node reports its host's memory: memory sets a hollow node's"))
			case m.Cmp(MinNodeMemory) < 0 || m.Cmp(MaxNodeMemory) > 0:
				errs = append(errs, field.Invalid(p.Child("memory"), n.Memory, fmt.Sprintf("must be between %s and %s", MinNodeMemory.String(), MaxNodeMemory.String())))
			}
		}
		if n.GPUs != nil && c.Backend == BackendKind && (n.GPUs.Partitioning != "" || n.GPUs.Sharing != "" || n.GPUs.TimeSlices != 0) {
			errs = append(errs, field.Forbidden(p.Child("gpus"), "partitioning, sharing and time slices run on the embedded backend only, so far: the kind backend's chart does not pass them to the driver"))
		}
		if n.GPUs != nil && n.GPUs.TimeSlices > 0 && n.GPUs.Partitioning != "" && !c.GateEnabled(GateDeviceCompatibilityGroups) {
			errs = append(errs, field.Forbidden(p.Child("gpus", "timeSlices"), "time slices beside MIG partitions need featureGates: {"+GateDeviceCompatibilityGroups+": true} (alpha, off by default): the two declare compatibility groups, and a scheduler without the gate ignores the node's GPUs"))
		}
		if n.GPUs != nil && c.Backend == BackendKind && n.GPUs.DeviceMetadata {
			errs = append(errs, field.Forbidden(p.Child("gpus", "deviceMetadata"), "device metadata runs on the embedded backend only, so far: the kind backend's chart does not pass it to the driver"))
		}
		if n.GPUs != nil && c.Backend == BackendKind && n.GPUs.Attach != "" {
			errs = append(errs, field.Forbidden(p.Child("gpus", "attach"), "fabric attach runs on the embedded backend only, so far: its attach controller is part of the embedded lab process"))
		}
		if n.NICs != nil {
			np := p.Child("nics")
			switch {
			case c.Driver != nil:
				errs = append(errs, field.Forbidden(np, "the lab runs driver.command on every node instead of dralab's drivers: its devices are the outside driver's"))
			case c.Backend == BackendKind && (n.NICs.SkipNodeOperations || n.NICs.NUMANodeList):
				errs = append(errs, field.Forbidden(np, "skipNodeOperations and numaNodeList run on the embedded backend only, so far: on kind one release of the NIC driver serves every node alike"))
			default:
				errs = append(errs, n.NICs.validate(np)...)
				if n.NICs.SkipNodeOperations && !c.GateEnabled(GateOptionalNodeOperations) {
					errs = append(errs, field.Invalid(np.Child("skipNodeOperations"), true, "needs featureGates: {"+GateOptionalNodeOperations+": true} (alpha, off by default): without it the API server drops the field from the NICs' ResourceSlices"))
				}
				if n.NICs.NUMANodeList && !c.GateEnabled(GateListTypeAttributes) {
					errs = append(errs, field.Invalid(np.Child("numaNodeList"), true, "needs featureGates: {"+GateListTypeAttributes+": true} (alpha, off by default): without it the API server refuses the NICs' list attributes"))
				}
			}
		}
		if n.GPUs != nil {
			if c.Driver != nil {
				errs = append(errs, field.Forbidden(p.Child("gpus"), "the lab runs driver.command on every node instead of dralab's GPU driver: its devices are the outside driver's"))
			} else {
				errs = append(errs, n.GPUs.validate(p.Child("gpus"))...)
			}
		}
	}
	if c.Driver != nil {
		errs = append(errs, c.Driver.validate(field.NewPath("driver"))...)
	}
	return errs
}

func (g *GPUs) validate(gp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case g.NVML != "":
		if g.Profile != "" || g.Count != 0 {
			errs = append(errs, field.Forbidden(gp.Child("nvml"), "NVML reports the GPUs: give profile and count, or nvml, not both"))
		}
		if !strings.HasPrefix(g.NVML, NVMLMockPrefix) && g.NVML != NVMLHost {
			errs = append(errs, field.NotSupported(gp.Child("nvml"), g.NVML, []string{NVMLHost, NVMLMockPrefix + "<server>"}))
		}
	case g.Profile == "":
		errs = append(errs, field.Required(gp.Child("profile"), "name a GPU profile, e.g. h100-80gb (or set nvml)"))
	default:
		if g.Count < 1 || g.Count > MaxGPUsPerNode {
			errs = append(errs, field.Invalid(gp.Child("count"), g.Count, fmt.Sprintf("must be between 1 and %d", MaxGPUsPerNode)))
		}
	}
	if g.Mode != GPUModeDRA && g.Mode != GPUModeDevicePlugin {
		errs = append(errs, field.NotSupported(gp.Child("mode"), g.Mode, []string{GPUModeDRA, GPUModeDevicePlugin}))
	}
	errs = append(errs, g.validateModes(gp)...)
	if g.DeviceMetadata && g.Mode == GPUModeDevicePlugin {
		errs = append(errs, field.Forbidden(gp.Child("deviceMetadata"), "the kubelet gives device metadata to claims; mode device-plugin serves an extended resource"))
	}
	return append(errs, g.validateAttach(gp)...)
}

// validateAttach checks attach and attachDelay: one value, whole fake
// GPUs served through DRA only, and a delay the scheduler waits for.
func (g *GPUs) validateAttach(gp *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case g.Attach == "":
		if g.AttachDelay != "" {
			errs = append(errs, field.Forbidden(gp.Child("attachDelay"), "attachDelay is the attach delay of attach: "+AttachFabric+"; set attach too or drop it"))
		}
		return errs
	case g.Attach != AttachFabric:
		errs = append(errs, field.NotSupported(gp.Child("attach"), g.Attach, []string{AttachFabric}))
	case g.NVML != "":
		errs = append(errs, field.Forbidden(gp.Child("attach"), "only fake GPUs (profile and count) are fabric-attached by the lab"))
	case g.Mode == GPUModeDevicePlugin:
		errs = append(errs, field.Forbidden(gp.Child("attach"), "mode device-plugin counts whole GPUs and has no binding conditions; attach needs mode dra"))
	case g.Partitioning != "" || g.Sharing != "":
		errs = append(errs, field.Forbidden(gp.Child("attach"), "a fabric-attached GPU is attached whole, to one claim: not with partitioning or sharing, so far"))
	}
	if g.AttachDelay != "" {
		d, err := time.ParseDuration(g.AttachDelay)
		switch {
		case err != nil:
			errs = append(errs, field.Invalid(gp.Child("attachDelay"), g.AttachDelay, "must be a duration such as 2s or 500ms"))
		case d < 0 || d > MaxAttachDelay:
			errs = append(errs, field.Invalid(gp.Child("attachDelay"), g.AttachDelay, fmt.Sprintf("must be between 0s and %v: the scheduler gives up on binding conditions after 10m", MaxAttachDelay)))
		}
	}
	return errs
}

// validateModes checks partitioning and sharing: each has one value, a
// GPU is partitioned or shared, not both, and only fake GPUs served
// through DRA are (counting mode counts whole GPUs).
func (g *GPUs) validateModes(gp *field.Path) field.ErrorList {
	var errs field.ErrorList
	for _, m := range []struct {
		name, value, want string
	}{{"partitioning", g.Partitioning, PartitioningMIG}, {"sharing", g.Sharing, SharingMemory}} {
		switch {
		case m.value == "":
			continue
		case m.value != m.want:
			errs = append(errs, field.NotSupported(gp.Child(m.name), m.value, []string{m.want}))
		case g.NVML != "":
			errs = append(errs, field.Forbidden(gp.Child(m.name), "only fake GPUs (profile and count) are partitioned or shared by the lab"))
		case g.Mode == GPUModeDevicePlugin:
			errs = append(errs, field.Forbidden(gp.Child(m.name), "mode device-plugin counts whole GPUs; partitioning and sharing need mode dra"))
		}
	}
	if g.Partitioning != "" && g.Sharing != "" {
		errs = append(errs, field.Forbidden(gp.Child("sharing"), "a GPU is partitioned or shared, not both: give partitioning or sharing"))
	}
	switch ts := g.TimeSlices; {
	case ts == 0:
	case ts < 0 || ts > MaxTimeSlices:
		errs = append(errs, field.Invalid(gp.Child("timeSlices"), ts, fmt.Sprintf("must be between 1 and %d", MaxTimeSlices)))
	case g.NVML != "":
		errs = append(errs, field.Forbidden(gp.Child("timeSlices"), "only fake GPUs (profile and count) are time-sliced by the lab"))
	case g.Mode == GPUModeDevicePlugin:
		errs = append(errs, field.Forbidden(gp.Child("timeSlices"), "mode device-plugin counts whole GPUs; time slices need mode dra"))
	case g.Sharing != "":
		errs = append(errs, field.Forbidden(gp.Child("timeSlices"), "a GPU shared by memory is not time-sliced too: give sharing or timeSlices"))
	}
	return errs
}

// The values of a node's GPUs section that name what the GPU driver does;
// the driver's packages spell them the same (lab's tests check).
const (
	// NVMLHost reads the machine's NVML library; NVMLMockPrefix+<server>
	// one of go-nvml's mock servers.
	NVMLHost       = "host"
	NVMLMockPrefix = "mock:"
	// PartitioningMIG publishes MIG partitions of each GPU; SharingMemory
	// lets claims share a GPU's memory; AttachFabric attaches the GPUs from
	// a fabric, with binding conditions.
	PartitioningMIG = "mig"
	SharingMemory   = "memory"
	AttachFabric    = "fabric"
	// MaxTimeSlices bounds timeSlices.
	MaxTimeSlices = 16
)

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

// Source names the configuration in messages: the file it was read from.
func (c *Config) Source() string {
	if c.source == "" {
		return "(built in code)"
	}
	return c.source
}

func (d *Driver) validate(dp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if msgs := validation.IsDNS1123Subdomain(d.Name); len(msgs) > 0 || !strings.Contains(d.Name, ".") {
		errs = append(errs, field.Invalid(dp.Child("name"), d.Name, "must be a DNS subdomain with at least one dot, the driver's name"))
	}
	if len(d.Command) == 0 || d.Command[0] == "" {
		errs = append(errs, field.Required(dp.Child("command"), "the kubelet plugin's command line, e.g. [/usr/local/bin/my-plugin, --node-name={nodeName}]"))
	}
	for i, word := range d.Command {
		errs = append(errs, checkPlaceholders(dp.Child("command").Index(i), word)...)
	}
	for _, k := range slices.Sorted(maps.Keys(d.Env)) {
		errs = append(errs, checkPlaceholders(dp.Child("env").Key(k), d.Env[k])...)
	}
	for i, m := range d.Manifests {
		if !filepath.IsAbs(m) {
			errs = append(errs, field.Invalid(dp.Child("manifests").Index(i), m, "must be absolute once loaded (relative paths are resolved against the configuration file)"))
		} else if _, err := os.Stat(m); err != nil {
			errs = append(errs, field.Invalid(dp.Child("manifests").Index(i), m, err.Error()))
		}
	}
	return errs
}

// checkPlaceholders refuses a word's unknown placeholders, and anything
// that looks like one but is not ("{port:}", "{Port:x}").
func checkPlaceholders(p *field.Path, word string) field.ErrorList {
	var errs field.ErrorList
	for _, ph := range placeholder.FindAllString(word, -1) {
		if !known(ph) {
			errs = append(errs, field.NotSupported(p, ph, slices.Sorted(maps.Keys(Placeholders))))
		}
	}
	if rest := placeholder.ReplaceAllString(word, ""); strings.Contains(rest, portPrefix) {
		errs = append(errs, field.Invalid(p, word, "a port placeholder is {port:<name>}, the name in lower case letters, digits and dashes"))
	}
	return errs
}

// PortNames lists the names of the {port:<name>} placeholders of the
// driver's command and environment.
func (d *Driver) PortNames() []string {
	names := map[string]bool{}
	for _, word := range append(slices.Clone(d.Command), slices.Collect(maps.Values(d.Env))...) {
		for _, ph := range placeholder.FindAllString(word, -1) {
			if name, ok := strings.CutPrefix(ph, portPrefix); ok {
				names[strings.TrimSuffix(name, "}")] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(names))
}

// PortPlaceholder is the placeholder of a named port, for Expand's values.
func PortPlaceholder(name string) string { return portPrefix + name + "}" }

// Expand fills the placeholders of a driver's command and environment
// with a node's values.
func (d *Driver) Expand(values map[string]string) (command []string, env map[string]string) {
	fill := func(word string) string {
		return placeholder.ReplaceAllStringFunc(word, func(ph string) string {
			if v, ok := values[ph]; ok {
				return v
			}
			return ph
		})
	}
	command = make([]string, len(d.Command))
	for i, word := range d.Command {
		command[i] = fill(word)
	}
	env = make(map[string]string, len(d.Env))
	for k, v := range d.Env {
		env[k] = fill(v)
	}
	return command, env
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
