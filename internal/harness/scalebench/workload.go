package scalebench

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
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
)

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

// Cases lists every case, the baseline first.
func Cases() []string {
	return []string{CaseCounting, CaseClaim, CaseSelector, CaseFirstAvailable, CaseExtendedResource, CaseMatchAttribute}
}

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
	}
	return nil, fmt.Errorf("unknown case %q; cases: %v", name, Cases())
}

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
