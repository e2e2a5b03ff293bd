package config

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A backendLimit is something a configuration may ask that a backend does
// not do, and why. The kind backend runs dralab's drivers from the chart on
// kind's nodes; the embedded backend runs the Kubernetes it is built with.
// Their limits are listed here, in one place. validate reports each as
// Forbidden at its field.
type backendLimit struct {
	backend string
	// field is where the limit is reported: under the lab (lab set) or
	// under a node (node set).
	field []string
	lab   func(c *Config) bool
	node  func(n *Node) bool
	why   string
}

// backendLimits are the backends' limits on the lab and on a node's own
// fields; each kind of device's section declares its own (limits), which
// allLimits adds.
var backendLimits = []backendLimit{
	{backend: BackendEmbedded, field: []string{"nodeImage"}, lab: func(c *Config) bool { return c.NodeImage != "" },
		why: "a kind lab's node image: an embedded lab runs the Kubernetes it is built with"},
	{backend: BackendKind, field: []string{"controlPlane"}, lab: func(c *Config) bool { return c.ControlPlane != nil },
		why: "the embedded backend's control plane only"},
	{backend: BackendKind, field: []string{"memory"}, node: func(n *Node) bool { return n.Memory != "" },
		why: "a kind node has its container's memory: memory sets a hollow node's"},
}

// allLimits are every limit of the backends: the lab's and a node's, and
// those of each device section.
func allLimits() []backendLimit {
	out := slices.Clone(backendLimits)
	for _, s := range (&Node{}).deviceSections() {
		out = append(out, s.limits()...)
	}
	return out
}

// labLimits reports what the configuration asks of the lab that its
// backend does not do.
func (c *Config) labLimits() field.ErrorList {
	var errs field.ErrorList
	for _, l := range allLimits() {
		if l.backend == c.Backend && l.lab != nil && l.lab(c) {
			errs = append(errs, field.Forbidden(field.NewPath(l.field[0], l.field[1:]...), l.why))
		}
	}
	return errs
}

// nodeLimits reports what the configuration asks of a node that the lab's
// backend does not do, and the fields it reported ("gpus.attach"), whose
// own checks validate then leaves out.
func (c *Config) nodeLimits(n *Node, p *field.Path) (field.ErrorList, sets.Set[string]) {
	var errs field.ErrorList
	limited := sets.New[string]()
	for _, l := range allLimits() {
		if l.backend == c.Backend && l.node != nil && l.node(n) {
			errs = append(errs, field.Forbidden(p.Child(l.field[0], l.field[1:]...), l.why))
			limited.Insert(strings.Join(l.field, "."))
		}
	}
	return errs, limited
}
