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

// attachNode is what the controller knows of a node with fabric-attached
// GPUs: how long attaching takes, and where gpu:fail records failed GPUs.
type attachNode struct {
	delay  time.Duration
	faults string
}

// attachController plays the PCIe/CXL fabric manager of nodes with
// attach: fabric. For every device of such a node allocated to a claim
// whose status does not yet say, it waits the node's attach delay and
// then sets the binding condition (attached) or, when the GPU is failed
// in the node's faults file, the failure condition, on which the
// scheduler clears the allocation and schedules the pod again.
type attachController struct {
	client kubernetes.Interface
	nodes  map[string]attachNode

	mu sync.Mutex
	// pending are the devices being attached, by claim and device.
	pending map[attachKey]bool
	// decided are the conditions set per claim: each apply states all of
	// them, as server-side apply drops the manager's fields it omits.
	decided map[types.UID]map[deviceKey]*metav1apply.ConditionApplyConfiguration
}

type deviceKey struct{ pool, device string }

type attachKey struct {
	claim types.UID
	deviceKey
}

// fabricNodes are the lab's nodes with fabric-attached GPUs.
func fabricNodes(dir labstate.Dir, cfg *config.Config) map[string]attachNode {
	nodes := map[string]attachNode{}
	for _, n := range cfg.Nodes {
		if n.GPUs != nil && n.GPUs.Attach == config.AttachFabric && cfg.Driver == nil {
			nodes[n.Name] = attachNode{delay: n.GPUs.AttachDuration(), faults: dir.Node(n.Name).GPUFaults()}
		}
	}
	return nodes
}

// startAttachController runs the controller until ctx ends, when the lab
// has nodes with fabric-attached GPUs.
func startAttachController(ctx context.Context, dir labstate.Dir, cfg *config.Config) error {
	nodes := fabricNodes(dir, cfg)
	if len(nodes) == 0 {
		return nil
	}
	client, err := kubeclient.New(dir.Kubeconfig())
	if err != nil {
		return err
	}
	c := &attachController{client: client, nodes: nodes, pending: map[attachKey]bool{}, decided: map[types.UID]map[deviceKey]*metav1apply.ConditionApplyConfiguration{}}
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
	klog.FromContext(ctx).V(1).Info("Attach controller started", "nodes", len(nodes))
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
		node, ok := c.nodes[r.Pool]
		if r.Driver != gpu.DriverName || !ok || !slices.Contains(r.BindingConditions, fakegpu.ConditionAttached) {
			continue
		}
		key := attachKey{claim.UID, deviceKey{r.Pool, r.Device}}
		if c.pending[key] || c.decided[claim.UID][key.deviceKey] != nil || hasDecision(claim, r) {
			continue
		}
		c.pending[key] = true
		go c.attach(ctx, claim.Namespace, claim.Name, key, node)
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

// attach waits the node's delay, as a fabric manager takes to attach a
// GPU, then reports the outcome: failed when gpu:fail has failed the GPU
// by then.
func (c *attachController) attach(ctx context.Context, namespace, name string, key attachKey, node attachNode) {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KRef(namespace, name), "node", key.pool, "device", key.device)
	logger.V(1).Info("Attaching GPU", "delay", node.delay)
	defer func() {
		c.mu.Lock()
		delete(c.pending, key)
		c.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return
	case <-time.After(node.delay):
	}
	cond := metav1apply.Condition().
		WithType(fakegpu.ConditionAttached).
		WithStatus(metav1.ConditionTrue).
		WithReason(ReasonAttached).
		WithMessage(fmt.Sprintf("attached to node %s through the fabric", key.pool)).
		WithLastTransitionTime(metav1.Now())
	faults, err := gpu.ReadFaults(node.faults)
	if err != nil {
		// A fault file that does not decode fails nothing here either, as
		// the driver keeps its last good faults: the attachment goes ahead.
		logger.Error(err, "Reading the node's GPU faults")
	}
	if f, failed := faults[key.device]; failed {
		x := gpu.LookupXID(f.XID)
		cond = cond.WithType(fakegpu.ConditionAttachFailed).
			WithReason(ReasonAttachFailed).
			WithMessage(fmt.Sprintf("attaching to node %s failed: XID %d: %s", key.pool, x.Code, x.Description))
	}
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
		dk := deviceKey{r.Pool, r.Device}
		cd := decided[dk]
		if dk == key.deviceKey {
			cd = cond
		}
		if cd == nil || r.Driver != gpu.DriverName {
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
