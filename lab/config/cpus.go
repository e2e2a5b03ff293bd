package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

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

// isSet tells whether the node has CPU complexes.
func (s *CPUs) isSet() bool { return s != nil }

// validate checks a node's CPU complexes: a hollow node's, of dralab's CPU
// driver, within the driver's bounds, on an API server that keeps the
// complexes' mapping to the node's cpu.
func (s *CPUs) validate(c *Config, n *Node, p *field.Path, limited sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	cp := p.Child("cpus")
	switch {
	case limited.Has("cpus"):
	case n.Kind == NodeReal:
		errs = append(errs, field.Forbidden(cp, "a real node has its host's CPUs: cpus sets a hollow node's"))
	case c.Driver != nil:
		errs = append(errs, field.Forbidden(cp, "the lab runs driver.command on every node instead of dralab's drivers"))
	default:
		if s.Complexes < 1 || s.Complexes > MaxCPUComplexes {
			errs = append(errs, field.Invalid(cp.Child("complexes"), s.Complexes, fmt.Sprintf("must be between 1 and %d", MaxCPUComplexes)))
		}
		if s.CPUsPerComplex < 1 || s.CPUsPerComplex > MaxCPUsPerComplex {
			errs = append(errs, field.Invalid(cp.Child("cpusPerComplex"), s.CPUsPerComplex, fmt.Sprintf("must be between 1 and %d", MaxCPUsPerComplex)))
		}
		if !c.GateEnabled(GateNodeAllocatableResources) {
			errs = append(errs, field.Forbidden(cp, "needs featureGates: {"+GateNodeAllocatableResources+": true} (alpha, off by default): each complex maps to the node's cpu, which an API server without the gate drops from the CPU driver's ResourceSlices"))
		}
	}
	return errs
}

// limits: the kind backend runs no CPU driver.
func (*CPUs) limits() []backendLimit {
	return []backendLimit{
		{backend: BackendKind, field: []string{"cpus"}, node: func(n *Node) bool { return n.CPUs != nil },
			why: "the CPU driver runs on the embedded backend only, so far"},
	}
}
