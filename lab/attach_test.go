package lab_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/internal/labserver"
	"github.com/dralab/dralab/lab"
)

// fabricDelay is the attach delay of TestFabricAttach: long enough to see
// the pod wait unbound, and for a GPU failed during it to be tainted in its
// ResourceSlice before the attachment fails.
const fabricDelay = 15 * time.Second

// TestFabricAttach runs lab/examples/fabric.yaml (two fabric-attached
// H100s) with a 15 s attach delay. A pod's claim is allocated a GPU with
// the binding conditions in its result while the pod stays unbound (no
// spec.nodeName) and its claim's status lacks dralab.dev/attached; once
// the attach controller sets it, the pod is bound and runs. A GPU failed
// with gpu:fail during the delay fails the attachment
// (dralab.dev/attach-failed True): the scheduler clears the allocation,
// and the pod runs on the other GPU, the failed one not given again.
func TestFabricAttach(t *testing.T) {
	ctx := context.Background()
	cfg := exampleConfig(t, "fabric.yaml", "t-attach")
	cfg.Nodes[0].GPUs.AttachDelay = fabricDelay.String()
	l, _, client := upLab(ctx, t, stateRoot(t), binary(t), cfg)
	ns := createNamespace(ctx, t, client, "attach")
	if _, err := client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, scratchlab.ClaimTemplate(ns, "h100", gpu.Tiers[0].ClassName(), "", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("attached", func(t *testing.T) {
		h := watchClaims(ctx, t, client, ns, "attached")
		start := time.Now()
		pod := createPod(ctx, t, client, scratchlab.ClaimPod(ns, "attached", "h100"))
		claim, r := h.allocated(ctx, t, "")
		allocatedAt := time.Since(start)
		if p := getPod(ctx, t, client, ns, pod.Name); p.Spec.NodeName != "" {
			t.Errorf("pod bound to %s as soon as its claim was allocated, before %s", p.Spec.NodeName, fakegpu.ConditionAttached)
		}
		if !slices.Equal(r.BindingConditions, []string{fakegpu.ConditionAttached}) || !slices.Equal(r.BindingFailureConditions, []string{fakegpu.ConditionAttachFailed}) {
			t.Errorf("allocation result %+v: want binding condition %s, failure condition %s", r, fakegpu.ConditionAttached, fakegpu.ConditionAttachFailed)
		}
		if c := deviceCondition(claim, r, fakegpu.ConditionAttached); c != nil {
			t.Errorf("claim allocated with %s already set: %+v", fakegpu.ConditionAttached, c)
		}
		boundAt := waitBound(ctx, t, client, ns, pod.Name, start)
		waitPodRunning(ctx, t, client, ns, pod.Name)
		t.Logf("allocated %s after %v, bound after %v, attach delay %v", r.Device, allocatedAt, boundAt, fabricDelay)
		if boundAt-allocatedAt < fabricDelay-time.Second {
			t.Errorf("pod bound %v after its claim was allocated, before the attach delay %v", boundAt-allocatedAt, fabricDelay)
		}
		got, err := client.ResourceV1().ResourceClaims(ns).Get(ctx, claim.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := deviceCondition(got, r, fakegpu.ConditionAttached)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != labserver.ReasonAttached {
			t.Errorf("claim status.devices %+v: want %s True, reason %s", got.Status.Devices, fakegpu.ConditionAttached, labserver.ReasonAttached)
		}
		if !managedBy(got, labserver.AttachFieldManager) {
			t.Errorf("claim's status is not applied by field manager %s: %+v", labserver.AttachFieldManager, got.ManagedFields)
		}
		deletePods(ctx, t, client, ns, pod.Name)
	})

	t.Run("failed", func(t *testing.T) {
		h := watchClaims(ctx, t, client, ns, "rescheduled")
		start := time.Now()
		pod := createPod(ctx, t, client, scratchlab.ClaimPod(ns, "rescheduled", "h100"))
		claim, first := h.allocated(ctx, t, "")
		ref := lab.GPURef{Node: first.Pool, Device: first.Device}
		if _, err := l.FailGPU(ctx, ref, gpu.DefaultXID); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := l.HealGPU(ctx, ref); err != nil {
				t.Errorf("healing %s: %v", ref, err)
			}
		})
		failed := h.failed(ctx, t, claim.Name, first)
		failedAt := time.Since(start)
		if p := getPod(ctx, t, client, ns, pod.Name); p.Spec.NodeName != "" {
			t.Errorf("pod bound to %s although the attachment failed", p.Spec.NodeName)
		}
		_, second := h.allocated(ctx, t, first.Device)
		boundAt := waitBound(ctx, t, client, ns, pod.Name, start)
		waitPodRunning(ctx, t, client, ns, pod.Name)
		t.Logf("allocated %s, failed (%s: %s) after %v, rescheduled to %s, bound after %v, Running after %v", first.Device, failed.Type, failed.Message, failedAt, second.Device, boundAt, time.Since(start))
		if failed.Reason != labserver.ReasonAttachFailed {
			t.Errorf("failure condition %+v: want reason %s", failed, labserver.ReasonAttachFailed)
		}
		final := podClaim(ctx, t, client, getPod(ctx, t, client, ns, pod.Name))
		if d := final.Status.Allocation.Devices.Results[0].Device; d == first.Device {
			t.Errorf("the pod runs on the failed GPU %s", d)
		}
		if h.given(first.Device) != 1 {
			t.Errorf("the failed GPU %s was allocated %d times, want once", first.Device, h.given(first.Device))
		}
		deletePods(ctx, t, client, ns, pod.Name)
	})
}

// claimHistory records every version of a namespace's claims, so that
// short-lived states (a failure condition the scheduler acts on at once)
// are seen.
type claimHistory struct {
	mu       sync.Mutex
	versions []*resourceapi.ResourceClaim
	changed  chan struct{}
}

// watchClaims records the claims of a pod, by their generated names.
func watchClaims(ctx context.Context, t testing.TB, client kubernetes.Interface, ns, pod string) *claimHistory {
	t.Helper()
	w, err := client.ResourceV1().ResourceClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	h := &claimHistory{changed: make(chan struct{}, 1)}
	go func() {
		for ev := range w.ResultChan() {
			if c, ok := ev.Object.(*resourceapi.ResourceClaim); ok && strings.HasPrefix(c.Name, pod+"-") {
				h.mu.Lock()
				h.versions = append(h.versions, c)
				h.mu.Unlock()
				select {
				case h.changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	return h
}

// until waits, up to 2 minutes, for a recorded version that match accepts.
func (h *claimHistory) until(ctx context.Context, t testing.TB, what string, match func(*resourceapi.ResourceClaim) bool) *resourceapi.ResourceClaim {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	seen := 0
	for {
		h.mu.Lock()
		vs := h.versions[seen:]
		seen = len(h.versions)
		h.mu.Unlock()
		for _, c := range vs {
			if match(c) {
				return c
			}
		}
		select {
		case <-h.changed:
		case <-timeout:
			t.Fatalf("waited 2 minutes for a claim %s", what)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
}

// allocated waits for a claim allocated a device other than not.
func (h *claimHistory) allocated(ctx context.Context, t testing.TB, not string) (*resourceapi.ResourceClaim, resourceapi.DeviceRequestAllocationResult) {
	t.Helper()
	c := h.until(ctx, t, "allocated a GPU other than "+not, func(c *resourceapi.ResourceClaim) bool {
		return c.Status.Allocation != nil && len(c.Status.Allocation.Devices.Results) == 1 && c.Status.Allocation.Devices.Results[0].Device != not
	})
	return c, c.Status.Allocation.Devices.Results[0]
}

// failed waits for the failure condition of the claim's device.
func (h *claimHistory) failed(ctx context.Context, t testing.TB, name string, r resourceapi.DeviceRequestAllocationResult) metav1.Condition {
	t.Helper()
	c := h.until(ctx, t, name+" with "+fakegpu.ConditionAttachFailed+" True", func(c *resourceapi.ResourceClaim) bool {
		cond := deviceCondition(c, r, fakegpu.ConditionAttachFailed)
		return c.Name == name && cond != nil && cond.Status == metav1.ConditionTrue
	})
	return *deviceCondition(c, r, fakegpu.ConditionAttachFailed)
}

// given counts the allocations of a device among the recorded versions:
// each time it appears after a version without it.
func (h *claimHistory) given(device string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n, had := 0, false
	for _, c := range h.versions {
		has := c.Status.Allocation != nil && slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(r resourceapi.DeviceRequestAllocationResult) bool { return r.Device == device })
		if has && !had {
			n++
		}
		had = has
	}
	return n
}

// deviceCondition is a condition of an allocated device's status entry.
func deviceCondition(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult, typ string) *metav1.Condition {
	for _, d := range c.Status.Devices {
		if d.Driver == r.Driver && d.Pool == r.Pool && d.Device == r.Device {
			for i := range d.Conditions {
				if d.Conditions[i].Type == typ {
					return &d.Conditions[i]
				}
			}
		}
	}
	return nil
}

func managedBy(c *resourceapi.ResourceClaim, manager string) bool {
	for _, f := range c.ManagedFields {
		if f.Manager == manager && f.Subresource == "status" {
			return true
		}
	}
	return false
}

func createPod(ctx context.Context, t testing.TB, client kubernetes.Interface, pod *v1.Pod) *v1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func getPod(ctx context.Context, t testing.TB, client kubernetes.Interface, ns, name string) *v1.Pod {
	t.Helper()
	p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitBound waits for the pod to be bound to a node and returns when it
// was seen bound, since start.
func waitBound(ctx context.Context, t testing.TB, client kubernetes.Interface, ns, name string, start time.Time) time.Duration {
	t.Helper()
	var at time.Duration
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.Spec.NodeName == "" {
			return false, nil
		}
		at = time.Since(start)
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for pod %s to be bound: %v", name, err)
	}
	return at
}
