package scalebench

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
)

// Cases, named like scheduler_perf's so that results compare: each is one
// way for a pod to ask for a GPU.
const (
	// CaseCounting asks for dralab.dev/gpu: 1 from node capacity, the
	// device-plugin world: the baseline.
	CaseCounting = "counting"
	// CaseClaim asks, through a claim template, for one GPU of a tier
	// class (pods take the three tiers in turn).
	CaseClaim = "claim"
	// CaseSelector adds a CEL selector to the claim: memory ≥ 40Gi.
	CaseSelector = "selector"
	// CaseFirstAvailable asks for an H100, else an A100, else an L4.
	CaseFirstAvailable = "first-available"
	// CaseExtendedResource keeps the counting syntax (dralab.dev/gpu: 1)
	// and lets a DeviceClass serve it through DRA.
	CaseExtendedResource = "extended-resource"
	// CaseMatchAttribute asks for two GPUs under one PCIe root.
	CaseMatchAttribute = "match-attribute"
	// CaseWholeNode asks for a whole 8-GPU server per pod, no group: the
	// single-pod baseline of the gang cases, on the same lab and shape.
	CaseWholeNode = "whole-node"
	// CaseGang asks for the same, in PodGroups of GroupSize pods with
	// gang.minCount GroupSize: each group is bound whole or not at all.
	CaseGang = "gang"
	// CaseGangTopology adds the group's topology constraint: every pod of
	// a group in one NVLink domain (topology.dralab.dev/nvlink-domain).
	CaseGangTopology = "gang-topology"
)

// GroupSize is the number of pods of each gang, as many as the servers of
// one NVLink domain of the virtual nodes: groups of 8 pods × 8 GPUs.
const GroupSize = 8

// caseUpstream is scheduler_perf's SchedulingWithResourceClaimTemplate on
// the lab: one device of any GPU from a template (RunUpstreamShape).
const caseUpstream = "claim-template"

// States: how full the cluster is before the measured pods come.
const (
	// StateEmpty starts from an empty cluster (after a few warm-up pods).
	StateEmpty = "empty"
	// StateHalf starts with half of every node's GPUs in allocated claims
	// (bound pods, pinned four to a node).
	StateHalf = "half"
)

// Cases lists every case, the baseline first, then the whole-server
// cases, the single-pod one before the gangs it is their baseline of.
func Cases() []string {
	return []string{CaseCounting, CaseClaim, CaseSelector, CaseFirstAvailable, CaseExtendedResource, CaseMatchAttribute,
		CaseWholeNode, CaseGang, CaseGangTopology}
}

// WholeNodeCases are the cases whose pods take a whole server: they run on
// a lab with the workload gates on, and need GangMinNodes nodes.
func WholeNodeCases() []string { return []string{CaseWholeNode, CaseGang, CaseGangTopology} }

// GangMinNodes is the fewest nodes a whole-server case runs on: two NVLink
// domains, one for the warm-up or the half state's pods, one measured.
const GangMinNodes = 2 * GroupSize

// States lists every state.
func States() []string { return []string{StateEmpty, StateHalf} }

// GPUsPerNode is every virtual node's GPU count, as on an 8-GPU server.
const GPUsPerNode = 8

// Namespace holds the bench's pods and claim templates.
const Namespace = "scale-bench"

// phaseLabel marks a pod's phase of the run (prefill, warmup, measure).
const phaseLabel = "bench.dralab.dev/phase"

// The bench's own names: the extended resource of counting and of its DRA
// twin, and the classes and templates the cases use.
const (
	extendedResource = gpu.ExtendedResource
	countedClass     = "counted." + gpu.DriverName
	prefillTemplate  = "prefill"
)

// workload says how one case's pods ask for GPUs.
type workload struct {
	name string
	// counting nodes advertise their GPUs as node capacity; the others
	// publish ResourceSlices.
	counting bool
	// gpusPerPod is how many GPUs each measured pod takes.
	gpusPerPod int
	// classes and templates are created before any pod.
	classes   []resourceapi.DeviceClass
	templates []resourceapi.ResourceClaimTemplate
	// request adds the case's request to the i-th measured pod.
	request func(pod *v1.Pod, i int)
	// wholeNode pods each take every GPU of a server; gang ones join a
	// PodGroup of GroupSize, constrained to one NVLink domain when
	// topology is set.
	wholeNode, gang, topology bool
}

func workloadOf(name string) (*workload, error) {
	tiers := gpu.Tiers
	switch name {
	case CaseCounting:
		return &workload{name: name, counting: true, gpusPerPod: 1, request: countedRequest}, nil
	case CaseExtendedResource:
		counted := classWith(gpu.ClassAny, countedClass)
		counted.Spec.ExtendedResourceName = ptr.To(extendedResource)
		return &workload{name: name, gpusPerPod: 1, classes: []resourceapi.DeviceClass{counted}, request: countedRequest}, nil
	case CaseClaim:
		w := &workload{name: name, gpusPerPod: 1}
		for _, t := range tiers {
			w.templates = append(w.templates, template(name+"-"+t.Name, exactly(t.ClassName(), 1)))
		}
		w.request = func(pod *v1.Pod, i int) { claimRequest(pod, w.templates[i%len(w.templates)].Name) }
		return w, nil
	case CaseSelector:
		r := exactly(gpu.ClassAny, 1)
		r.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.capacity[%q].%s.compareTo(quantity("40Gi")) >= 0`, gpu.DriverName, gpu.CapacityMemory),
		}}}
		return withTemplate(name, 1, template(name, r)), nil
	case CaseFirstAvailable:
		r := resourceapi.DeviceRequest{Name: "gpu"}
		for _, t := range tiers {
			r.FirstAvailable = append(r.FirstAvailable, resourceapi.DeviceSubRequest{Name: t.Name, DeviceClassName: t.ClassName(), AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1})
		}
		return withTemplate(name, 1, template(name, r)), nil
	case caseUpstream:
		return withTemplate(name, 1, template(name, exactly(gpu.ClassAny, 1))), nil
	case CaseMatchAttribute:
		t := template(name, exactly(gpu.ClassAny, 2))
		t.Spec.Spec.Devices.Constraints = []resourceapi.DeviceConstraint{{
			Requests:       []string{"gpu"},
			MatchAttribute: ptr.To(resourceapi.FullyQualifiedName("resource.kubernetes.io/pcieRoot")),
		}}
		return withTemplate(name, 2, t), nil
	case CaseWholeNode, CaseGang, CaseGangTopology:
		w := withTemplate(name, GPUsPerNode, template(name, exactly(gpu.ClassAny, GPUsPerNode)))
		w.wholeNode, w.gang, w.topology = true, name != CaseWholeNode, name == CaseGangTopology
		if w.gang {
			claim := w.request
			w.request = func(pod *v1.Pod, i int) {
				claim(pod, i)
				pod.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(groupName(i))}
			}
		}
		return w, nil
	}
	return nil, fmt.Errorf("unknown case %q; cases: %v", name, Cases())
}

// groupName is the PodGroup of the i-th pod of a gang case.
func groupName(i int) string { return fmt.Sprintf("gang-%04d", i/GroupSize) }

// podGroup is the gang of GroupSize pods named so, with its topology
// constraint for gang-topology.
func (w *workload) podGroup(name string) *schedulingv1beta1.PodGroup {
	g := &schedulingv1beta1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: schedulingv1beta1.PodGroupSpec{SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{
			Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: GroupSize},
		}},
	}
	if w.topology {
		g.Spec.SchedulingConstraints = &schedulingv1beta1.PodGroupSchedulingConstraints{
			Topology: []schedulingv1beta1.TopologyConstraint{{Key: gpu.NodeNVLinkDomainLabel}},
		}
	}
	return g
}

// topologyGate is the gate of a PodGroup's topology constraint, on beside
// the PodGroup API in the labs of the whole-server cases: the gang cases'
// and, so that the ratio compares one scheduler with itself, their
// single-pod baseline's.
const topologyGate = "TopologyAwareWorkloadScheduling"

func withTemplate(name string, gpus int, t resourceapi.ResourceClaimTemplate) *workload {
	return &workload{name: name, gpusPerPod: gpus, templates: []resourceapi.ResourceClaimTemplate{t}, request: func(pod *v1.Pod, _ int) { claimRequest(pod, t.Name) }}
}

// prefill adds the half state's request to a pod pinned to a node: one GPU
// of any kind, counted or claimed as the case's nodes serve them.
func (w *workload) prefill(pod *v1.Pod) {
	if w.counting || w.name == CaseExtendedResource {
		countedRequest(pod, 0)
		return
	}
	claimRequest(pod, prefillTemplate)
}

// prefillTemplates are the templates the half state's pods need.
func (w *workload) prefillTemplates() []resourceapi.ResourceClaimTemplate {
	if w.counting || w.name == CaseExtendedResource {
		return nil
	}
	return []resourceapi.ResourceClaimTemplate{template(prefillTemplate, exactly(gpu.ClassAny, 1))}
}

func exactly(class string, count int64) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: count,
	}}
}

func template(name string, r resourceapi.DeviceRequest) resourceapi.ResourceClaimTemplate {
	return resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{r}},
		}},
	}
}

// classWith copies the driver's class of that name under a new name.
func classWith(from, name string) resourceapi.DeviceClass {
	for _, c := range gpu.DeviceClasses() {
		if c.Name == from {
			c.Name = name
			return c
		}
	}
	panic("no DeviceClass " + from) // the driver's classes are fixed
}

func countedRequest(pod *v1.Pod, _ int) {
	pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{extendedResource: resource.MustParse("1")}
}

func claimRequest(pod *v1.Pod, templateName string) {
	pod.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(templateName)}}
	pod.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: "gpu"}}
}

// newPod is a pod of the bench: never run (virtual nodes have no kubelet),
// only scheduled and bound.
func newPod(phase string, i int) *v1.Pod {
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("%s-%05d", phase, i),
			Namespace: Namespace,
			Labels:    map[string]string{phaseLabel: phase},
		},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](0),
			Containers:                    []v1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
}
