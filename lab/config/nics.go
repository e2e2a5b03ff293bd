package config

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"
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

// isSet tells whether the node has NICs.
func (s *NICs) isSet() bool { return s != nil }

// validate checks a node's NICs: dralab's NIC driver's, with the gates
// their alpha fields need.
func (s *NICs) validate(c *Config, _ *Node, p *field.Path, limited sets.Set[string]) field.ErrorList {
	var errs field.ErrorList
	np := p.Child("nics")
	switch {
	case c.Driver != nil:
		errs = append(errs, field.Forbidden(np, "the lab runs driver.command on every node instead of dralab's drivers: its devices are the outside driver's"))
	case limited.Has("nics"):
	default:
		errs = append(errs, s.validateCount(np)...)
		if s.SkipNodeOperations && !c.GateEnabled(GateOptionalNodeOperations) {
			errs = append(errs, field.Invalid(np.Child("skipNodeOperations"), true, "needs featureGates: {"+GateOptionalNodeOperations+": true} (alpha, off by default): without it the API server drops the field from the NICs' ResourceSlices"))
		}
		if s.NUMANodeList && !c.GateEnabled(GateListTypeAttributes) {
			errs = append(errs, field.Invalid(np.Child("numaNodeList"), true, "needs featureGates: {"+GateListTypeAttributes+": true} (alpha, off by default): without it the API server refuses the NICs' list attributes"))
		}
	}
	return errs
}

// validateCount checks the NICs' profile is named and their count within
// bounds.
func (s *NICs) validateCount(np *field.Path) field.ErrorList {
	var errs field.ErrorList
	if s.Profile == "" {
		errs = append(errs, field.Required(np.Child("profile"), "name a NIC profile, e.g. cx7-400g"))
	}
	if s.Count < 1 || s.Count > MaxNICsPerNode {
		errs = append(errs, field.Invalid(np.Child("count"), s.Count, fmt.Sprintf("must be between 1 and %d", MaxNICsPerNode)))
	}
	return errs
}

// limits: on kind one release of the NIC driver serves every node alike.
func (*NICs) limits() []backendLimit {
	return []backendLimit{
		{backend: BackendKind, field: []string{"nics"}, node: func(n *Node) bool {
			return n.NICs != nil && (n.NICs.SkipNodeOperations || n.NICs.NUMANodeList)
		}, why: "skipNodeOperations and numaNodeList run on the embedded backend only, so far: on kind one release of the NIC driver serves every node alike"},
	}
}
