package gpu

import (
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"
)

// Where a node sits, as node labels and as the attributes of its GPUs: the
// scheduler's topology constraints speak of node labels (a PodGroup's
// schedulingConstraints.topology key), a claim's matchAttribute of device
// attributes. The two carry the same values, so "one NVLink domain" means
// the same domains to both.
const (
	// NodeRackLabel is the node label of the node's rack. Kubernetes
	// defines no rack label, and a kubelet may not register labels of its
	// own domains beyond those it defines (the NodeRestriction admission
	// plugin refuses topology.kubernetes.io/rack): the lab's domain it is.
	NodeRackLabel = "topology.dralab.dev/rack"
	// NodeNVLinkDomainLabel is the node label of the node's NVLink domain:
	// the nodes whose GPUs reach each other over NVLink (an NVL72 rack, a
	// DGX SuperPOD scalable unit).
	NodeNVLinkDomainLabel = "topology.dralab.dev/nvlink-domain"
	// AttrRack and AttrNVLinkDomain are the GPU attributes with the same
	// values: qualified with a domain other than the driver's, so that
	// another driver (a NIC's) may publish them too and one matchAttribute
	// aligns both.
	AttrRack         = "topology.dralab.dev/rack"
	AttrNVLinkDomain = "topology.dralab.dev/nvlinkDomain"
)

// Topology is where a node sits: its rack and NVLink domain, either empty
// when unknown.
type Topology struct {
	Rack         string
	NVLinkDomain string
}

// Attributes are the device attributes of a GPU of the node: none for an
// unknown place.
func (t Topology) Attributes() map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	out := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	if t.Rack != "" {
		out[AttrRack] = resourceapi.DeviceAttribute{StringValue: ptr.To(t.Rack)}
	}
	if t.NVLinkDomain != "" {
		out[AttrNVLinkDomain] = resourceapi.DeviceAttribute{StringValue: ptr.To(t.NVLinkDomain)}
	}
	return out
}

// Labels are the node labels of the same place.
func (t Topology) Labels() map[string]string {
	out := map[string]string{}
	if t.Rack != "" {
		out[NodeRackLabel] = t.Rack
	}
	if t.NVLinkDomain != "" {
		out[NodeNVLinkDomainLabel] = t.NVLinkDomain
	}
	return out
}
