package devices

import (
	"context"
	"slices"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

const driver = "gpu.example.com"

// gpuSlice is node's pool at generation gen: a whole GPU and two halves,
// which share the GPU's 8 memory slices (the whole takes 8, a half 4).
func gpuSlice(node string, gen int64) resourceapi.ResourceSlice {
	consumes := func(n int64) []resourceapi.DeviceCounterConsumption {
		return []resourceapi.DeviceCounterConsumption{{CounterSet: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: *resource.NewQuantity(n, resource.DecimalSI)}}}}
	}
	return resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + string(rune('a'+gen))},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: driver, NodeName: ptr.To(node),
			Pool:           resourceapi.ResourcePool{Name: node, Generation: gen, ResourceSliceCount: 1},
			SharedCounters: []resourceapi.CounterSet{{Name: "gpu-0", Counters: map[string]resourceapi.Counter{"memory": {Value: *resource.NewQuantity(8, resource.DecimalSI)}}}},
			Devices: []resourceapi.Device{
				{Name: "gpu-0", ConsumesCounters: consumes(8)},
				{Name: "gpu-0-half-0", ConsumesCounters: consumes(4)},
				{Name: "gpu-0-half-1", ConsumesCounters: consumes(4)},
				{Name: "nic-0"},
			},
		},
	}
}

func claim(name string, admin bool, devs ...Key) resourceapi.ResourceClaim {
	c := resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	alloc := &resourceapi.AllocationResult{}
	for _, d := range devs {
		alloc.Devices.Results = append(alloc.Devices.Results, resourceapi.DeviceRequestAllocationResult{Request: "r", Driver: d.Driver, Pool: d.Pool, Device: d.Device, AdminAccess: ptr.To(admin)})
	}
	c.Status.Allocation = alloc
	return c
}

func names(devs []Device) []string {
	var out []string
	for _, d := range devs {
		out = append(out, d.Pool+"/"+d.Name)
	}
	return out
}

func TestCurrentIsTheNewestGeneration(t *testing.T) {
	other := gpuSlice("n2", 1)
	other.Spec.Driver = "other.example.com"
	s := &State{Slices: []resourceapi.ResourceSlice{gpuSlice("n1", 1), gpuSlice("n1", 2), gpuSlice("n2", 1), other}}
	if got := s.Current(driver, "n1"); len(got) != 1 || got[0].Spec.Pool.Generation != 2 {
		t.Errorf("Current(n1) = %d slices (generation %d); want the one of generation 2", len(got), got[0].Spec.Pool.Generation)
	}
	if got := s.Published(driver, ""); len(got) != 8 || got[0].Node != "n1" || got[4].Node != "n2" {
		t.Errorf("Published(any node) = %v; want n1's and n2's 4 devices each, newest generation only", names(got))
	}
	if got := s.Published("other.example.com", ""); len(got) != 4 || got[0].Driver != "other.example.com" {
		t.Errorf("Published(other driver) = %v; want its 4 devices", names(got))
	}
}

func TestFreeDevices(t *testing.T) {
	half := Key{driver, "n1", "gpu-0-half-0"}
	s := &State{
		Slices: []resourceapi.ResourceSlice{gpuSlice("n1", 1)},
		Claims: []resourceapi.ResourceClaim{
			claim("half", false, half),
			// Admin access holds no device.
			claim("admin", true, Key{driver, "n1", "nic-0"}),
			{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pending"}},
		},
	}
	if held := s.Held(); len(held) != 1 || held[half] != "ns/half" {
		t.Errorf("Held = %v; want only %s, by ns/half", held, half)
	}
	left := s.CountersLeft()
	if q := left[SetKey{driver, "n1", "gpu-0"}]["memory"]; q.Value() != 4 {
		t.Errorf("CountersLeft gpu-0/memory = %s; want 4 of 8 after a half", q.String())
	}
	// The whole GPU is held by no claim, but the half taken leaves its
	// counters too little.
	if got, want := names(s.Free(driver, "n1")), []string{"n1/gpu-0-half-1", "n1/nic-0"}; !slices.Equal(got, want) {
		t.Errorf("Free = %v; want %v", got, want)
	}
	// Nothing allocated: all four free, each on its own, but only the
	// whole GPU and the NIC (first fit) together.
	s.Claims = nil
	free := s.Free(driver, "")
	if len(free) != 4 {
		t.Errorf("Free with no claim = %v; want all 4", names(free))
	}
	if got, want := names(s.Together(free, 3)), []string{"n1/gpu-0", "n1/nic-0"}; !slices.Equal(got, want) {
		t.Errorf("Together(3) = %v; want %v: the halves share the whole GPU's counters", got, want)
	}
	if got := s.Together(free, 1); len(got) != 1 || got[0].Name != "gpu-0" {
		t.Errorf("Together(1) = %v; want the first", names(got))
	}
}

func TestRead(t *testing.T) {
	sl := gpuSlice("n1", 1)
	c := claim("half", false, Key{driver, "n1", "gpu-0-half-0"})
	client := fake.NewClientset(&sl, &c)
	s, err := Read(context.Background(), client, driver)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := names(s.Free(driver, "n1")), []string{"n1/gpu-0-half-1", "n1/nic-0"}; !slices.Equal(got, want) {
		t.Errorf("Free after Read = %v; want %v", got, want)
	}
}
