package cluster

import (
	v1 "k8s.io/api/core/v1"
)

// Pods are kept on or off nodes by the nodes' names, the metadata.name
// field, never by the kubernetes.io/hostname label: the label is the
// kubelet's host name, which differs from the node's name wherever a
// kubelet is given --hostname-override or a cloud provider names nodes,
// and a check that pinned by the label would wait for a node that has no
// such label and blame the driver.

// nameIs is a node selector term that a node matches by its name. A field
// requirement on metadata.name takes exactly one value.
func nameIs(op v1.NodeSelectorOperator, node string) v1.NodeSelectorRequirement {
	return v1.NodeSelectorRequirement{Key: "metadata.name", Operator: op, Values: []string{node}}
}

// onNodes keeps a pod on nodes, replacing what kept it elsewhere; none:
// anywhere.
func onNodes(nodes []string) func(*v1.Pod) {
	if len(nodes) == 0 {
		return nil
	}
	// Terms are ORed: one per node.
	var terms []v1.NodeSelectorTerm
	for _, n := range nodes {
		terms = append(terms, v1.NodeSelectorTerm{MatchFields: []v1.NodeSelectorRequirement{nameIs(v1.NodeSelectorOpIn, n)}})
	}
	return func(p *v1.Pod) {
		p.Spec.NodeSelector = nil
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: terms}}}
	}
}

// offNodes keeps a pod off nodes.
func offNodes(p *v1.Pod, nodes []string) {
	if len(nodes) == 0 {
		return
	}
	// Requirements of one term are ANDed: not this one, nor that one.
	var term v1.NodeSelectorTerm
	for _, n := range nodes {
		term.MatchFields = append(term.MatchFields, nameIs(v1.NodeSelectorOpNotIn, n))
	}
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
		NodeSelectorTerms: []v1.NodeSelectorTerm{term},
	}}}
}
