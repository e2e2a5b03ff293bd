package allocation

import (
	"context"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// A device that allows multiple allocations, shared by two claims,
// consumes its counters once, as the allocator charges them: of 80Gi, its
// 40Gi leave room for an exclusive half of 40Gi, not for a whole GPU of
// 80Gi, and the shortage names both claims holding it.
func TestWhySharedDeviceConsumesCountersOnce(t *testing.T) {
	memory := func(q string) []resourceapi.DeviceCounterConsumption {
		return consumes("gpu-0-counters", map[string]string{"memory": q})
	}
	s := snapshot([]resourceapi.Device{
		withName(resourceapi.Device{Name: "ts", AllowMultipleAllocations: ptr.To(true), ConsumesCounters: memory("40Gi")}),
		withName(resourceapi.Device{Name: "half", ConsumesCounters: memory("40Gi")}),
		withName(resourceapi.Device{Name: "whole", ConsumesCounters: memory("80Gi")}),
	}, claimOn("a", "ts", map[resourceapi.QualifiedName]resource.Quantity{}), claimOn("b", "ts", map[resourceapi.QualifiedName]resource.Quantity{}))
	s.Slices[0].Spec.SharedCounters[0].Counters["memory"] = resourceapi.Counter{Value: resource.MustParse("80Gi")}
	holders := s.AllocatedDevices()
	ctx := context.Background()
	if code, msg, err := s.whyAlternatives(ctx, "ns", "half", []alternative{named("half")}, holders); err != nil || code != "" {
		t.Errorf("half: %s %q %v; want no reason: the shares of ts take 40Gi of 80Gi once", code, msg, err)
	}
	code, msg, err := s.whyAlternatives(ctx, "ns", "whole", []alternative{named("whole")}, holders)
	if want := "n/whole needs 80Gi of counter memory of gpu-0-counters, which has 80Gi: 40Gi held by a, b"; err != nil || code != CounterExhausted || !strings.Contains(msg, want) {
		t.Errorf("whole: %s %q %v; want %s: %q", code, msg, err, CounterExhausted, want)
	}
}
