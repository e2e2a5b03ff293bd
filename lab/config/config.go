// Package config defines the lab configuration file: which backend runs the
// lab, and which nodes it has with which GPUs. The file is versioned and
// decoded strictly: an unknown or misspelt field is an error naming the file
// and the field, never silently ignored.
package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/lab/examples"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
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
	// Nodes are the lab's nodes, in order.
	Nodes []Node `json:"nodes"`
}

// Node is one lab node.
type Node struct {
	// Name is the Kubernetes node name.
	Name string `json:"name"`
	// Kind is "hollow" (the default) or "real".
	Kind string `json:"kind,omitempty"`
	// Labels are added to the node's labels.
	Labels map[string]string `json:"labels,omitempty"`
	// GPUs are the devices the node's GPU driver publishes; none for a CPU-only node.
	GPUs *GPUs `json:"gpus,omitempty"`
}

// GPUs names a GPU profile and how many such GPUs a node carries.
type GPUs struct {
	// Profile names the GPU model, e.g. "h100-80gb".
	Profile string `json:"profile"`
	// Count is the number of GPUs.
	Count int `json:"count"`
	// Mode is how the node's driver serves them: "dra" (the default,
	// ResourceSlices and claims) or "device-plugin" (an extended resource
	// count, the way GPU device plugins work). Never both on one node.
	Mode string `json:"mode,omitempty"`
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

// Load reads and validates a configuration file.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading lab config: %w", err)
	}
	return Parse(path, data)
}

// ErrInvalid wraps every decoding and validation error.
var ErrInvalid = errors.New("invalid lab config")

// Parse decodes and validates a configuration; source names it in errors.
func Parse(source string, data []byte) (*Config, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w %s: the file is empty", ErrInvalid, source)
	}
	jsonData, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalid, source, err)
	}
	var cfg Config
	strict, err := sigsjson.UnmarshalStrict(jsonData, &cfg)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalid, source, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalid, source, errors.Join(strict...))
	}
	if err := cfg.Complete(); err != nil {
		return nil, fmt.Errorf("%w %s: %w", ErrInvalid, source, err)
	}
	return &cfg, nil
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
	nodesPath := field.NewPath("nodes")
	if len(c.Nodes) == 0 {
		errs = append(errs, field.Required(nodesPath, "a lab needs at least one node"))
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
		}
		if n.GPUs != nil {
			gp := p.Child("gpus")
			if n.GPUs.Profile == "" {
				errs = append(errs, field.Required(gp.Child("profile"), "name a GPU profile, e.g. h100-80gb"))
			} else if known := fakegpu.BuiltinNames(); !slices.Contains(known, n.GPUs.Profile) {
				errs = append(errs, field.NotSupported(gp.Child("profile"), n.GPUs.Profile, known))
			}
			if n.GPUs.Mode != GPUModeDRA && n.GPUs.Mode != GPUModeDevicePlugin {
				errs = append(errs, field.NotSupported(gp.Child("mode"), n.GPUs.Mode, []string{GPUModeDRA, GPUModeDevicePlugin}))
			}
			if n.GPUs.Count < 1 || n.GPUs.Count > MaxGPUsPerNode {
				errs = append(errs, field.Invalid(gp.Child("count"), n.GPUs.Count, fmt.Sprintf("must be between 1 and %d", MaxGPUsPerNode)))
			}
		}
	}
	return errs
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
