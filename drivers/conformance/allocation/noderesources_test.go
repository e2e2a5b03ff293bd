package allocation

import (
	"context"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"
)

func withOverhead(name, perPod string) resourceapi.Device {
	return resourceapi.Device{Name: name, NodeAllocatableResources: map[v1.ResourceName]resourceapi.NodeAllocatableResource{
		v1.ResourceMemory: {Overhead: &resourceapi.NodeAllocatableOverhead{PerPod: ptr.To(resource.MustParse(perPod))}},
	}}
}

func memoryPod(name, memory, claim, node string) v1.Pod {
	return v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1.PodSpec{NodeName: node,
			Containers: []v1.Container{{Name: "main", Resources: v1.ResourceRequirements{
				Requests: v1.ResourceList{v1.ResourceMemory: resource.MustParse(memory)},
				Claims:   []v1.ResourceClaim{{Name: "gpu"}},
			}}},
			ResourceClaims: []v1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
		},
	}
}

// A pod whose GPU is free and whose memory fits alone, but not with the
// GPU's host memory: NodeResources, naming the node's figures, the free
// GPU whose overhead counts (not the held one) and how much is missing.
func TestWhyNodeResources(t *testing.T) {
	ctx := context.Background()
	trainerClaim := claimOn("trainer-gpu", "gpu-0", nil)
	workerClaim := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "worker-gpu"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "any", Count: 1}}}}}}
	s := snapshot([]resourceapi.Device{withOverhead("gpu-0", "8Gi"), withOverhead("gpu-1", "8Gi")}, trainerClaim, workerClaim)
	for i := range s.Slices {
		s.Slices[i].Spec.NodeName = ptr.To("n")
	}
	s.Claims = map[string]*resourceapi.ResourceClaim{"ns/trainer-gpu": &s.AllClaims[0], "ns/worker-gpu": &s.AllClaims[1]}
	s.Nodes = map[string]*v1.Node{"n": {ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Allocatable: v1.ResourceList{v1.ResourceMemory: resource.MustParse("64Gi")}}}}
	trainer := memoryPod("trainer", "40Gi", "trainer-gpu", "n")
	trainer.Status.Phase = v1.PodRunning
	trainer.Status.NodeAllocatableResourceClaimStatuses = []v1.NodeAllocatableResourceClaimStatus{{ResourceClaimName: "trainer-gpu", Containers: []string{"main"},
		Overhead: []v1.NodeAllocatableOverheadResources{{Name: v1.ResourceMemory, PerPod: ptr.To(resource.MustParse("8Gi"))}}}}
	s.Bound = []v1.Pod{trainer}
	worker := memoryPod("worker", "12Gi", "worker-gpu", "")
	holders := s.AllocatedDevices()

	if got := DRAResources(&trainer); len(got) != 1 || got.Memory().Cmp(resource.MustParse("8Gi")) != 0 {
		t.Errorf("DRAResources(trainer) = %v, want memory 8Gi", got)
	}
	code, msg, err := s.whyNodeResources(ctx, &worker, "0/1 nodes are available: 1 Insufficient memory.", holders)
	if err != nil || code != NodeResources {
		t.Fatalf("got %q %q %v, want NodeResources", code, msg, err)
	}
	for _, want := range []string{"node n has 64Gi of host memory allocatable", "its pods hold 48Gi (8Gi of it through their devices)", "asks 12Gi for its containers", "8Gi of host memory for n/gpu-1 (request gpu)", "20Gi, 4Gi more than is free"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}

	// A device that adds CPUs too: the memory sentence names its memory
	// only.
	both := withOverhead("gpu-1", "8Gi")
	both.NodeAllocatableResources[v1.ResourceCPU] = resourceapi.NodeAllocatableResource{Mapping: &resourceapi.NodeAllocatableMapping{DeviceMultiplier: ptr.To(resource.MustParse("4"))}}
	s.Slices[1].Spec.Devices[1] = both
	if _, msg, _ := s.whyNodeResources(ctx, &worker, "0/1 nodes are available: 1 Insufficient memory.", holders); !strings.Contains(msg, "8Gi of host memory for n/gpu-1") || strings.Contains(msg, "CPUs") {
		t.Errorf("a device adding memory and CPUs, short of memory: %q, want its memory only", msg)
	}

	// With 12Gi more on the node the worker fits: the scheduler's
	// refusal is stale, and the report says it has not retried it.
	s.Nodes["n"].Status.Allocatable[v1.ResourceMemory] = resource.MustParse("76Gi")
	if code, msg, _ := s.whyNodeResources(ctx, &worker, "0/1 nodes are available: 1 Insufficient memory.", holders); code != NotRetried || !strings.Contains(msg, "stale: node n has 28Gi of host memory free, this pod needs 20Gi") {
		t.Errorf("on a 76Gi node: %q %q, want NotRetried and the stale message named", code, msg)
	}
	s.Nodes["n"].Status.Allocatable[v1.ResourceMemory] = resource.MustParse("64Gi")
	// The scheduler said nothing of memory: not ours to explain.
	if code, _, _ := s.whyNodeResources(ctx, &worker, "0/1 nodes are available: 1 cannot allocate all claims.", holders); code != "" {
		t.Errorf("without Insufficient memory: %q, want no reason", code)
	}
	// Devices that add nothing: the pod is short of memory on its own.
	s.Slices[1].Spec.Devices = []resourceapi.Device{{Name: "gpu-0"}, {Name: "gpu-1"}}
	if code, _, _ := s.whyNodeResources(ctx, &worker, "0/1 nodes are available: 1 Insufficient memory.", holders); code != "" {
		t.Errorf("devices without nodeAllocatableResources: %q, want no reason", code)
	}
}

// A snapshot read for one namespace has no other namespace's pods: what
// holds a node's memory it lists where a node is in question, that node's
// pods (other namespaces' too), or every bound pod once where many nodes
// are.
func TestNodeHeldListsWhereANodeIsInQuestion(t *testing.T) {
	ctx := context.Background()
	trainer := memoryPod("trainer", "40Gi", "trainer-gpu", "n")
	trainer.Namespace = "other"
	elsewhere := memoryPod("elsewhere", "30Gi", "elsewhere-gpu", "m")
	waiting := memoryPod("worker", "12Gi", "worker-gpu", "")
	client := fake.NewClientset(&trainer, &elsewhere, &waiting)
	var selectors []string
	client.PrependReactor("list", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		selectors = append(selectors, a.(clienttesting.ListAction).GetListRestrictions().Fields.String())
		return false, nil, nil
	})
	s := &Snapshot{boundOn: boundReader(client)}
	held, _, err := s.nodeHeld(ctx, "n", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := held[v1.ResourceMemory]; got.Cmp(resource.MustParse("40Gi")) != 0 || !slices.Equal(selectors, []string{"spec.nodeName=n"}) {
		t.Errorf("node n, alone in question: held %v after lists %q; want 40Gi (the other namespace's trainer, not m's pod or the waiting one) after one list of n's pods", held, selectors)
	}
	selectors = nil
	for range 2 {
		if held, _, err = s.nodeHeld(ctx, "m", 17); err != nil {
			t.Fatal(err)
		}
	}
	if got := held[v1.ResourceMemory]; got.Cmp(resource.MustParse("30Gi")) != 0 || !slices.Equal(selectors, []string{"spec.nodeName!="}) || len(s.Bound) != 2 {
		t.Errorf("17 nodes in question: held %v on m after lists %q, %d pods kept; want 30Gi after one list of every bound pod, both kept", held, selectors, len(s.Bound))
	}
}

// What a device adds is the API's sum: its overhead per pod, its overhead
// per container for each container that references the claim, and a
// capacity mapping's consumed capacity times its multiplier (what the
// request asks, else the capacity's default, else all of it).
func TestDevicePerPodAsTheAPISays(t *testing.T) {
	d := &resourceapi.Device{Name: "socket-0",
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			"memory": {Value: resource.MustParse("128Gi"), RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: ptr.To(resource.MustParse("8Gi"))}},
		},
		NodeAllocatableResources: map[v1.ResourceName]resourceapi.NodeAllocatableResource{
			v1.ResourceMemory: {
				Mapping:  &resourceapi.NodeAllocatableMapping{CapacityKey: ptr.To[resourceapi.QualifiedName]("memory"), CapacityMultiplier: ptr.To(resource.MustParse("2"))},
				Overhead: &resourceapi.NodeAllocatableOverhead{PerPod: ptr.To(resource.MustParse("1Gi")), PerContainer: ptr.To(resource.MustParse("512Mi"))},
			},
		}}
	asks := resourceapi.DeviceRequest{Name: "mem", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "any",
		Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("16Gi")}}}}
	for _, c := range []struct {
		name string
		req  resourceapi.DeviceRequest
		refs int64
		want string
	}{
		// 1Gi + 3 × 512Mi + 16Gi × 2
		{"asked 16Gi, three containers", asks, 3, "35328Mi"},
		// 1Gi + 512Mi + the default 8Gi × 2
		{"asking nothing, one container", resourceapi.DeviceRequest{Name: "mem", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "any"}}, 1, "17920Mi"},
	} {
		got, ok := devicePerPod(d, v1.ResourceMemory, c.refs, consumedOf(d, c.req))
		if want := resource.MustParse(c.want); !ok || got.Cmp(want) != 0 {
			t.Errorf("%s: the device adds %s of memory; want %s", c.name, got.String(), want.String())
		}
	}
	pod := &v1.Pod{Spec: v1.PodSpec{
		InitContainers: []v1.Container{{Name: "load", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "mem"}}}}},
		Containers: []v1.Container{
			{Name: "a", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "mem"}}}},
			{Name: "b", Resources: v1.ResourceRequirements{Claims: []v1.ResourceClaim{{Name: "other"}}}},
		}}}
	if n := containerRefs(pod, "mem"); n != 2 {
		t.Errorf("containerRefs = %d; want 2, an init container and a container", n)
	}
}
