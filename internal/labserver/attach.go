package labserver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	metav1apply "k8s.io/client-go/applyconfigurations/meta/v1"
	resourceapply "k8s.io/client-go/applyconfigurations/resource/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/dralab/dralab/drivers/fabric"
	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// AttachFieldManager owns the binding conditions the attach controller
// writes into claims' device status: server-side apply merges them with
// the entries and conditions the node's driver owns.
const AttachFieldManager = "dralab-attach-controller"

// Reasons of the attach controller's conditions.
const (
	ReasonAttached     = "Attached"
	ReasonAttachFailed = "AttachFailed"
)

// attachTarget is what the controller knows of a pool of attachable GPUs:
// how long attaching takes, and what it ends in.
type attachTarget struct {
	delay time.Duration
	// decide is the outcome of attaching a device to a node: attached
	// (""), failed (a message), or no answer at all (hang).
	decide func(device, node string) (failure string, hang bool)
	// mark, if set, records a device whose attachment failed or never
	// came, as a fabric manager marks it (the fabric's pool taints it).
	mark func(ctx context.Context, device string)
}

// targetKey names a pool of attachable GPUs: a node's fabric-attached
// GPUs (the GPU driver's pool of the node) or an enclosure of network-
// attached GPUs (drivers/fabric).
type targetKey struct{ driver, pool string }

// attachController plays the PCIe/CXL fabric manager of nodes with
// attach: fabric and of enclosures with an attachDelay. For every such
// device allocated to a claim whose status does not yet say, it waits the
// delay and then sets the binding condition (attached) or the failure
// condition, on which the scheduler clears the allocation and schedules the
// pod again; for a device that hangs it sets nothing, and the scheduler
// gives the allocation up after its binding timeout.
type attachController struct {
	client  kubernetes.Interface
	targets map[targetKey]attachTarget

	mu sync.Mutex
	// pending are the devices being attached, by claim and device.
	pending map[attachKey]bool
	// decided are the conditions set per claim: each apply states all of
	// them, as server-side apply drops the manager's fields it omits.
	decided map[types.UID]map[deviceKey]*metav1apply.ConditionApplyConfiguration
}

type deviceKey struct{ driver, pool, device string }

type attachKey struct {
	claim types.UID
	deviceKey
}

// attachTargets are the lab's pools of attachable GPUs: the nodes' with
// fabric-attached GPUs, whose failures gpu:fail writes in the node's
// faults file, and the enclosures with an attach delay, whose failing and
// hanging GPUs the configuration names and whose publisher marks them.
func attachTargets(dir labstate.Dir, cfg *config.Config, enclosures *fabricPublisher) map[targetKey]attachTarget {
	targets := map[targetKey]attachTarget{}
	for _, n := range cfg.Nodes {
		if n.GPUs != nil && n.GPUs.Attach == config.AttachFabric && cfg.Driver == nil {
			targets[targetKey{gpu.DriverName, n.Name}] = gpuTarget(n.GPUs.AttachDuration(), dir.Node(n.Name).GPUFaults())
		}
	}
	for _, p := range cfg.Fabric {
		if p.AttachDelay == "" {
			continue
		}
		targets[targetKey{fabric.DriverName, p.Name}] = attachTarget{
			delay: p.AttachDuration(),
			decide: func(device, node string) (string, bool) {
				for _, i := range p.AttachFails {
					if device == fabricDevice(p.Name, i) {
						return fmt.Sprintf("attaching to node %s failed: the fabric manager lost the GPU's link", node), false
					}
				}
				for _, i := range p.AttachHangs {
					if device == fabricDevice(p.Name, i) {
						return "", true
					}
				}
				return "", false
			},
			mark: func(ctx context.Context, device string) { enclosures.markFailed(ctx, p.Name, device) },
		}
	}
	return targets
}

// gpuTarget is a node's fabric-attached GPUs: attaching fails for a GPU
// that gpu:fail has failed by then.
func gpuTarget(delay time.Duration, faultsFile string) attachTarget {
	return attachTarget{delay: delay, decide: func(device, node string) (string, bool) {
		faults, err := gpu.ReadFaults(faultsFile)
		if err != nil {
			// A fault file that does not decode fails nothing here
			// either, as the driver keeps its last good faults: the
			// attachment goes ahead.
			klog.Background().Error(err, "Reading the node's GPU faults", "file", faultsFile)
		}
		if f, failed := faults[device]; failed {
			x := gpu.LookupXID(f.XID)
			return fmt.Sprintf("attaching to node %s failed: XID %d: %s", node, x.Code, x.Description), false
		}
		return "", false
	}}
}

// startAttachController runs the controller until ctx ends, when the lab
// has nodes with fabric-attached GPUs.
func startAttachController(ctx context.Context, dir labstate.Dir, cfg *config.Config, enclosures *fabricPublisher) error {
	targets := attachTargets(dir, cfg, enclosures)
	if len(targets) == 0 {
		return nil
	}
	client, err := kubeclient.New(dir.Kubeconfig())
	if err != nil {
		return err
	}
	c := &attachController{client: client, targets: targets, pending: map[attachKey]bool{}, decided: map[types.UID]map[deviceKey]*metav1apply.ConditionApplyConfiguration{}}
	ctx = klog.NewContext(ctx, klog.FromContext(ctx).WithName("attach"))
	factory := informers.NewSharedInformerFactory(client, 0)
	informer := factory.Resource().V1().ResourceClaims().Informer()
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.observe(ctx, obj) },
		UpdateFunc: func(_, obj any) { c.observe(ctx, obj) },
		DeleteFunc: func(obj any) { c.forget(obj) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	klog.FromContext(ctx).V(1).Info("Attach controller started", "pools", len(targets))
	return nil
}

// observe starts attaching each device of the claim that waits for it.
func (c *attachController) observe(ctx context.Context, obj any) {
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if claim.Status.Allocation == nil {
		// Deallocated (a failed attachment, a deleted pod): a new
		// allocation, even of the same device, is attached anew.
		delete(c.decided, claim.UID)
		return
	}
	for _, r := range claim.Status.Allocation.Devices.Results {
		target, ok := c.targets[targetKey{r.Driver, r.Pool}]
		if !ok || !slices.Contains(r.BindingConditions, fakegpu.ConditionAttached) {
			continue
		}
		key := attachKey{claim.UID, deviceKey{r.Driver, r.Pool, r.Device}}
		if c.pending[key] || c.decided[claim.UID][key.deviceKey] != nil || hasDecision(claim, r) {
			continue
		}
		c.pending[key] = true
		go c.attach(ctx, claim.Namespace, claim.Name, key, target, allocatedNode(claim.Status.Allocation, r.Pool))
	}
}

// hasDecision tells whether the claim's status already holds the
// attached or attach-failed condition of the result's device (set by an
// earlier run of the lab process).
func hasDecision(claim *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) bool {
	for _, s := range claim.Status.Devices {
		if s.Driver == r.Driver && s.Pool == r.Pool && s.Device == r.Device {
			for _, cond := range s.Conditions {
				if cond.Type == fakegpu.ConditionAttached || cond.Type == fakegpu.ConditionAttachFailed {
					return true
				}
			}
		}
	}
	return false
}

func (c *attachController) forget(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	claim, ok := obj.(*resourceapi.ResourceClaim)
	if !ok {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.decided, claim.UID)
}

// allocatedNode is the node an allocation binds to: the one node of its
// node selector, or the pool's where there is none (a node's own GPUs).
func allocatedNode(a *resourceapi.AllocationResult, pool string) string {
	if a.NodeSelector != nil && len(a.NodeSelector.NodeSelectorTerms) == 1 {
		for _, f := range a.NodeSelector.NodeSelectorTerms[0].MatchFields {
			if f.Key == "metadata.name" && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return pool
}

// attach waits the target's delay, as a fabric manager takes to attach a
// GPU, then reports the outcome: attached, or failed; a device that hangs
// gets no answer (and is marked).
func (c *attachController) attach(ctx context.Context, namespace, name string, key attachKey, target attachTarget, node string) {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(namespace, name), "node", node, "pool", key.pool, "device", key.device)
	logger.V(1).Info("Attaching GPU", "delay", target.delay)
	defer func() {
		c.mu.Lock()
		delete(c.pending, key)
		c.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return
	case <-time.After(target.delay):
	}
	failure, hang := target.decide(key.device, node)
	if hang {
		// The fabric manager marks the GPU it cannot reach at once: its
		// taint keeps the next allocation off it, while this one waits
		// for the scheduler's binding timeout, which no answer ends.
		logger.Info("GPU attach hangs: no answer until the scheduler gives the allocation up")
		if target.mark != nil {
			target.mark(ctx, key.device)
		}
		return
	}
	cond := metav1apply.Condition().
		WithType(fakegpu.ConditionAttached).
		WithStatus(metav1.ConditionTrue).
		WithReason(ReasonAttached).
		WithMessage(fmt.Sprintf("attached to node %s through the fabric", node)).
		WithLastTransitionTime(metav1.Now())
	if failure != "" {
		cond = cond.WithType(fakegpu.ConditionAttachFailed).
			WithReason(ReasonAttachFailed).
			WithMessage(failure)
	}
	var err error
	// The scheduler waits up to 10 minutes for the condition, and no
	// claim update may come to start this again: an API error is retried.
	backoff := wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 8, Cap: 10 * time.Second}
	retryErr := wait.ExponentialBackoffWithContext(ctx, backoff, func(ctx context.Context) (bool, error) {
		err = c.apply(ctx, namespace, name, key, cond)
		return err == nil || errors.Is(err, errNotAllocated) || apierrors.IsNotFound(err), nil
	})
	switch {
	case err != nil && (errors.Is(err, errNotAllocated) || apierrors.IsNotFound(err)):
		// Deleted or given back meanwhile: nothing waits for it.
		logger.V(1).Info("GPU no longer to attach", "reason", err.Error())
		return
	case err != nil || retryErr != nil:
		logger.Error(errors.Join(err, retryErr), "Setting the binding condition", "condition", *cond.Type)
		return
	}
	logger.Info("GPU attach done", "condition", *cond.Type, "message", *cond.Message)
	if failure != "" && target.mark != nil {
		target.mark(ctx, key.device)
	}
}

// errNotAllocated: the device to attach is no longer allocated to the claim.
var errNotAllocated = errors.New("no longer allocated")

// apply writes every condition the controller has decided for the
// claim's devices that are still allocated, with cond for key's device.
func (c *attachController) apply(ctx context.Context, namespace, name string, key attachKey, cond *metav1apply.ConditionApplyConfiguration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	claim, err := c.client.ResourceV1().ResourceClaims(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if claim.UID != key.claim || claim.Status.Allocation == nil {
		return fmt.Errorf("claim %s/%s: %w", namespace, name, errNotAllocated)
	}
	decided := c.decided[key.claim]
	if decided == nil {
		decided = map[deviceKey]*metav1apply.ConditionApplyConfiguration{}
	}
	status := resourceapply.ResourceClaimStatus()
	allocated := map[deviceKey]*metav1apply.ConditionApplyConfiguration{}
	for _, r := range claim.Status.Allocation.Devices.Results {
		dk := deviceKey{r.Driver, r.Pool, r.Device}
		cd := decided[dk]
		if dk == key.deviceKey {
			cd = cond
		}
		if _, ok := c.targets[targetKey{r.Driver, r.Pool}]; cd == nil || !ok {
			continue
		}
		allocated[dk] = cd
		status.WithDevices(resourceapply.AllocatedDeviceStatus().
			WithDriver(r.Driver).WithPool(r.Pool).WithDevice(r.Device).
			WithConditions(cd))
	}
	if allocated[key.deviceKey] == nil {
		return fmt.Errorf("device %s/%s of claim %s/%s: %w", key.pool, key.device, namespace, name, errNotAllocated)
	}
	ac := resourceapply.ResourceClaim(name, namespace).WithStatus(status)
	if _, err := c.client.ResourceV1().ResourceClaims(namespace).ApplyStatus(ctx, ac, metav1.ApplyOptions{FieldManager: AttachFieldManager, Force: true}); err != nil {
		return err
	}
	c.decided[key.claim] = allocated
	return nil
}
