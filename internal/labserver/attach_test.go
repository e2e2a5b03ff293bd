package labserver

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
)

// A claim of two fabric GPUs, one of them failed: each device gets its
// own condition (attached, attach-failed with the XID), in entries the
// driver's own condition (Ready, another field manager) shares, neither
// apply drops what the other set, and an API error is retried.
func TestAttachControllerAppliesEachDevicesCondition(t *testing.T) {
	ctx := context.Background()
	faults := filepath.Join(t.TempDir(), "gpu-faults.json")
	if err := gpu.WriteFaults(faults, map[string]gpu.GPUFault{"gpu-1": {XID: 79}}); err != nil {
		t.Fatal(err)
	}
	result := func(device string) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: gpu.DriverName, Pool: "fabric", Device: device,
			BindingConditions: []string{fakegpu.ConditionAttached}, BindingFailureConditions: []string{fakegpu.ConditionAttachFailed}}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: "ns", UID: types.UID("uid-two")},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{result("gpu-0"), result("gpu-1")},
		}}},
	}
	client := fake.NewClientset(claim)
	// The driver's entry for gpu-0, as it applies it at prepare.
	ready := resourceapply.ResourceClaim("two", "ns").WithStatus(resourceapply.ResourceClaimStatus().WithDevices(
		resourceapply.AllocatedDeviceStatus().WithDriver(gpu.DriverName).WithPool("fabric").WithDevice("gpu-0").
			WithConditions(metav1apply.Condition().WithType("Ready").WithStatus(metav1.ConditionTrue).WithReason("Prepared").WithMessage("prepared").WithLastTransitionTime(metav1.Now()))))
	if _, err := client.ResourceV1().ResourceClaims("ns").ApplyStatus(ctx, ready, metav1.ApplyOptions{FieldManager: gpu.DriverName, Force: true}); err != nil {
		t.Fatal(err)
	}

	// The API server fails the controller's first apply: it is retried.
	var failed atomic.Bool
	client.PrependReactor("patch", "resourceclaims", func(clienttesting.Action) (bool, runtime.Object, error) {
		if failed.CompareAndSwap(false, true) {
			return true, nil, apierrors.NewServerTimeout(resourceapi.Resource("resourceclaims"), "patch", 1)
		}
		return false, nil, nil
	})
	c := &attachController{client: client, nodes: map[string]attachNode{"fabric": {delay: 10 * time.Millisecond, faults: faults}},
		pending: map[attachKey]bool{}, decided: map[types.UID]map[deviceKey]*metav1apply.ConditionApplyConfiguration{}}
	c.observe(ctx, claim)
	var got *resourceapi.ResourceClaim
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = client.ResourceV1().ResourceClaims("ns").Get(ctx, "two", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return condition(got, "gpu-0", fakegpu.ConditionAttached) != nil && condition(got, "gpu-1", fakegpu.ConditionAttachFailed) != nil, nil
	})
	if err != nil {
		t.Fatalf("waiting for both devices' conditions: %v; status.devices %+v", err, got.Status.Devices)
	}
	if !failed.Load() {
		t.Error("no apply failed: the retry went untested")
	}
	if c := condition(got, "gpu-0", fakegpu.ConditionAttached); c.Status != metav1.ConditionTrue || c.Reason != ReasonAttached {
		t.Errorf("gpu-0: %+v, want %s True, reason %s", c, fakegpu.ConditionAttached, ReasonAttached)
	}
	if c := condition(got, "gpu-1", fakegpu.ConditionAttachFailed); c.Status != metav1.ConditionTrue || c.Reason != ReasonAttachFailed ||
		c.Message != "attaching to node fabric failed: XID 79: GPU has fallen off the bus" {
		t.Errorf("gpu-1: %+v, want %s True, reason %s, with the XID", c, fakegpu.ConditionAttachFailed, ReasonAttachFailed)
	}
	if c := condition(got, "gpu-1", fakegpu.ConditionAttached); c != nil {
		t.Errorf("the failed gpu-1 is attached: %+v", c)
	}
	if c := condition(got, "gpu-0", "Ready"); c == nil {
		t.Errorf("the driver's Ready condition of gpu-0 is gone: %+v", got.Status.Devices)
	}

	// An update of the claim that still lacks nothing starts nothing anew,
	// once the attachments have finished: each leaves pending a moment
	// after its condition is written.
	inFlight := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.pending)
	}
	if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return inFlight() == 0, nil
	}); err != nil {
		t.Fatalf("attachments still in flight after both conditions were written: %v", err)
	}
	c.observe(ctx, got)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) != 0 {
		t.Errorf("attaching again: %v", c.pending)
	}
}

func condition(c *resourceapi.ResourceClaim, device, typ string) *metav1.Condition {
	for _, d := range c.Status.Devices {
		if d.Device != device {
			continue
		}
		for i := range d.Conditions {
			if d.Conditions[i].Type == typ {
				return &d.Conditions[i]
			}
		}
	}
	return nil
}

// A claim given back during the attach delay (its pod deleted, another
// device's attachment failed) is no error: nothing is written.
func TestAttachOfADeallocatedClaimWritesNothing(t *testing.T) {
	ctx := context.Background()
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "gone", Namespace: "ns", UID: types.UID("uid-gone")}}
	client := fake.NewClientset(claim)
	c := &attachController{client: client, pending: map[attachKey]bool{}, decided: map[types.UID]map[deviceKey]*metav1apply.ConditionApplyConfiguration{}}
	key := attachKey{claim.UID, deviceKey{"fabric", "gpu-0"}}
	err := c.apply(ctx, "ns", "gone", key, metav1apply.Condition().WithType(fakegpu.ConditionAttached))
	if !errors.Is(err, errNotAllocated) {
		t.Fatalf("apply = %v, want errNotAllocated", err)
	}
	got, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "gone", metav1.GetOptions{})
	if err != nil || len(got.Status.Devices) != 0 {
		t.Errorf("claim status.devices %+v (%v), want none", got.Status.Devices, err)
	}
}
