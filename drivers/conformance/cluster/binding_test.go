package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// attachableGPUs are two GPUs of which gpu-1 has binding conditions.
func attachableGPUs() []resourceapi.Device {
	devices := fakeDevices(2, true)
	devices[1].BindingConditions = []string{"example.com/attached"}
	devices[1].BindingFailureConditions = []string{"example.com/attach-failed"}
	return devices
}

func withBindingConditions(k *kit) {
	k.m.Capabilities = map[manifest.Capability]bool{manifest.DRADeviceBindingConditions: true}
	k.m.BindingConditions = &manifest.BindingConditions{DeviceClass: fakeDriver}
}

func bindingConditions(r resourceapi.DeviceRequestAllocationResult) []string {
	return r.BindingConditions
}

// A scheduler that waits for the binding conditions binds the pod only
// once the controller has set them: the check sees the pod wait, then run.
func TestBindingConditionsHoldThePod(t *testing.T) {
	f, k := newFakeClusterOf(t, refuseWithEvent, attachableGPUs())
	withBindingConditions(k)
	f.setConditionsAfter(t, time.Second, bindingConditions)
	if err := k.bindingConditions(context.Background(), t.Logf, k); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.allocated[fakeDriver+"/"+fakeNode+"/gpu-1"] || f.allocated[fakeDriver+"/"+fakeNode+"/gpu-0"] {
		t.Errorf("allocated %v, want gpu-1 only: the one device with binding conditions", f.allocated)
	}
}

// A scheduler that binds before the conditions are met fails the check.
func TestBindingConditionsFailWhenBoundBefore(t *testing.T) {
	f, k := newFakeClusterOf(t, refuseWithEvent, attachableGPUs())
	f.ignoreBindingConditions.Store(true)
	withBindingConditions(k)
	f.setConditionsAfter(t, time.Second, bindingConditions)
	err := k.bindingConditions(context.Background(), t.Logf, k)
	if err == nil || !strings.Contains(err.Error(), "is bound to node-a while the binding conditions [example.com/attached] of node-a/gpu-1 are not all True") {
		t.Fatalf("got %v, want the pod found bound before its binding conditions", err)
	}
}

// A failure condition fails the check, naming it.
func TestBindingConditionsFailOnAFailureCondition(t *testing.T) {
	f, k := newFakeClusterOf(t, refuseWithEvent, attachableGPUs())
	withBindingConditions(k)
	f.setConditionsAfter(t, 500*time.Millisecond, func(r resourceapi.DeviceRequestAllocationResult) []string { return r.BindingFailureConditions })
	err := k.bindingConditions(context.Background(), t.Logf, k)
	if err == nil || !strings.Contains(err.Error(), "the failure condition example.com/attach-failed of node-a/gpu-1 is True") {
		t.Fatalf("got %v, want the failure condition named", err)
	}
}

// Conditions met before the suite could see the pod wait are no evidence.
func TestBindingConditionsNeedToBeSeenWaiting(t *testing.T) {
	f, k := newFakeClusterOf(t, refuseWithEvent, attachableGPUs())
	withBindingConditions(k)
	f.conditionsAtAllocation = bindingConditions
	err := k.bindingConditions(context.Background(), t.Logf, k)
	if err == nil || !strings.Contains(err.Error(), "never seen unbound") {
		t.Fatalf("got %v, want the missing evidence named", err)
	}
}

// A class without devices with binding conditions has nothing to check.
func TestBindingConditionsNeedDevicesWithThem(t *testing.T) {
	_, k := newFakeClusterOf(t, refuseWithEvent, fakeDevices(2, true))
	withBindingConditions(k)
	err := k.bindingConditions(context.Background(), t.Logf, k)
	if skip := (skipCheck{}); !errors.As(err, &skip) || !strings.Contains(err.Error(), "no free device of class gpu.example.com publishes binding conditions") {
		t.Fatalf("got %v, want the check not made (nothing to check it on), no device found", err)
	}
}
