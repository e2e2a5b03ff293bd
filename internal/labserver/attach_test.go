package labserver

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
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

	"github.com/dralab/dralab/drivers/fabric"
	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
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
	c := &attachController{client: client, targets: map[targetKey]attachTarget{{gpu.DriverName, "fabric"}: gpuTarget(10*time.Millisecond, faults)},
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
	key := attachKey{claim.UID, deviceKey{gpu.DriverName, "fabric", "gpu-0"}}
	err := c.apply(ctx, "ns", "gone", key, metav1apply.Condition().WithType(fakegpu.ConditionAttached))
	if !errors.Is(err, errNotAllocated) {
		t.Fatalf("apply = %v, want errNotAllocated", err)
	}
	got, err := client.ResourceV1().ResourceClaims("ns").Get(ctx, "gone", metav1.GetOptions{})
	if err != nil || len(got.Status.Devices) != 0 {
		t.Errorf("claim status.devices %+v (%v), want none", got.Status.Devices, err)
	}
}

// An enclosure's GPU that the configuration fails gets the failure
// condition and is marked; one that hangs gets no condition and is marked
// too (its taint keeps the next allocation off it); the others attach.
func TestEnclosureAttachFailsAndHangs(t *testing.T) {
	ctx := context.Background()
	cfg := &config.Config{Fabric: []config.FabricPool{{Name: "e", Profile: "h100-80gb", Count: 3, AllNodes: true, AttachDelay: "10ms", AttachFails: []int{0}, AttachHangs: []int{1}}}}
	targets := attachTargets(labstate.Dir(t.TempDir()), cfg, nil)
	var mu sync.Mutex
	var marked []string
	target := targets[targetKey{fabric.DriverName, "e"}]
	target.mark = func(_ context.Context, device string) {
		mu.Lock()
		defer mu.Unlock()
		marked = append(marked, device)
	}
	targets[targetKey{fabric.DriverName, "e"}] = target
	result := func(device string) resourceapi.DeviceRequestAllocationResult {
		return resourceapi.DeviceRequestAllocationResult{Request: device, Driver: fabric.DriverName, Pool: "e", Device: device,
			BindingConditions: []string{fabric.ConditionAttached}, BindingFailureConditions: []string{fabric.ConditionAttachFailed}}
	}
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "three", Namespace: "ns", UID: types.UID("uid-three")},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices:      resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{result("e-gpu-0"), result("e-gpu-1"), result("e-gpu-2")}},
			NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{"a1"}}}}}},
		}},
	}
	client := fake.NewClientset(claim)
	c := &attachController{client: client, targets: targets, pending: map[attachKey]bool{}, decided: map[types.UID]map[deviceKey]*metav1apply.ConditionApplyConfiguration{}}
	c.observe(ctx, claim)
	var got *resourceapi.ResourceClaim
	err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = client.ResourceV1().ResourceClaims("ns").Get(ctx, "three", metav1.GetOptions{})
		return err == nil && condition(got, "e-gpu-0", fabric.ConditionAttachFailed) != nil && condition(got, "e-gpu-2", fabric.ConditionAttached) != nil, err
	})
	if err != nil {
		t.Fatalf("waiting for the conditions: %v; %+v", err, got.Status.Devices)
	}
	if c := condition(got, "e-gpu-2", fabric.ConditionAttached); c.Message != "attached to node a1 through the fabric" {
		t.Errorf("e-gpu-2: %q, want the node the allocation binds to", c.Message)
	}
	if condition(got, "e-gpu-1", fabric.ConditionAttached) != nil || condition(got, "e-gpu-1", fabric.ConditionAttachFailed) != nil {
		t.Errorf("the hanging e-gpu-1 got a condition: %+v", got.Status.Devices)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(marked) == 2, nil
	})
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(marked)
	if err != nil || !slices.Equal(marked, []string{"e-gpu-0", "e-gpu-1"}) {
		t.Errorf("marked %v, want the failed e-gpu-0 and the hanging e-gpu-1, not the attached e-gpu-2", marked)
	}
}
