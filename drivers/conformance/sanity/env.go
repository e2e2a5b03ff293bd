package sanity

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

const (
	// requestName is the one request of every test claim; the driver must
	// name it in the devices it prepares, or the kubelet cannot tell which
	// container gets them.
	requestName = "sanity"
	// claimPrefix starts the name of every test claim.
	claimPrefix = "sanity-"
	// managedByLabel marks test claims, so that one left behind by a
	// killed run can be told from a user's claim.
	managedByLabel = "app.kubernetes.io/managed-by"
	managedBy      = "dralab-sanity"
	// pollInterval is how often the checks look again for something that
	// takes time: the driver's ResourceSlices, a restarted driver.
	pollInterval = 200 * time.Millisecond
	// cleanupTimeout bounds cleaning up after a check whose own context
	// may already be done.
	cleanupTimeout = 30 * time.Second
)

// env is one check's connection to the driver and the claims it created,
// so that cleanup finds them however the check ended.
type env struct {
	s    *session
	conn *grpc.ClientConn
	dra  drapb.DRAPluginClient

	mu sync.Mutex
	// claims were created in the API server and are deleted at cleanup.
	claims []*resourceapi.ResourceClaim
	// prepared were sent to NodePrepareResources and not unprepared since;
	// a prepare that timed out may still have prepared, so they count too.
	prepared map[types.UID]*resourceapi.ResourceClaim
}

// connect finds the driver in the registry and connects to its DRA
// endpoint. It fails with the registration rule: a driver the kubelet
// cannot find cannot be prepared for.
func (e *env) connect(ctx context.Context) (*plugin, error) {
	p, err := e.s.findPlugin(ctx)
	if err != nil {
		return nil, err
	}
	if p.info.Endpoint == "" {
		return p, broke("registration", "GetInfo on %s returns no endpoint", p.socket)
	}
	conn, err := dial(p.info.Endpoint)
	if err != nil {
		return p, broke("registration", "endpoint %q: %v", p.info.Endpoint, err)
	}
	e.closeConn()
	e.conn, e.dra = conn, drapb.NewDRAPluginClient(conn)
	return p, nil
}

// reconnect waits until the driver has registered again and its endpoint
// answers, polling because a restarting driver comes back on its own time.
func (e *env) reconnect(ctx context.Context) error {
	e.closeConn()
	var last error
	err := wait.PollUntilContextTimeout(ctx, pollInterval, e.s.prepareTimeout, true, func(ctx context.Context) (bool, error) {
		if _, last = e.connect(ctx); last != nil {
			return false, nil
		}
		if last = pingDRA(ctx, e.dra, infoTimeout); last != nil {
			e.closeConn()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("did not register again within %v: %w", e.s.prepareTimeout, cmp.Or(last, err))
	}
	return nil
}

func (e *env) closeConn() {
	if e.conn != nil {
		_ = e.conn.Close()
	}
	e.conn, e.dra = nil, nil
}

// device is a device of the driver's pool on the node.
type device struct{ devices.Device }

func (d device) String() string { return d.Pool + "/" + d.Name }

// freeDevices returns up to n devices of the driver on the node that the
// allocator could give now, all at once (devices.State), waiting for the
// driver's ResourceSlices to appear since a driver publishes them
// asynchronously. Fewer than n are returned when fewer are free.
func (e *env) freeDevices(ctx context.Context, n int) ([]device, error) {
	var st *devices.State
	var published int
	var listErr error
	// List errors are retried like an empty list: an API server may
	// hiccup, and a driver may not have published yet.
	err := wait.PollUntilContextTimeout(ctx, pollInterval, e.s.prepareTimeout, true, func(ctx context.Context) (bool, error) {
		st, listErr = devices.Read(ctx, e.s.cfg.Client, e.s.driver)
		if listErr != nil {
			return false, nil
		}
		published = len(ranked(st.Published(e.s.driver, e.s.cfg.NodeName)))
		return published > 0, nil
	})
	switch {
	case err == nil:
	case listErr != nil:
		return nil, broke(setupRule, "reading the ResourceSlices of driver %s and the ResourceClaims: %v", e.s.driver, listErr)
	default:
		return nil, broke(setupRule, "no ResourceSlice of driver %s lists a device on node %s (waited %v)", e.s.driver, e.s.cfg.NodeName, e.s.prepareTimeout)
	}
	var free []device
	for _, d := range st.Together(ranked(st.Free(e.s.driver, e.s.cfg.NodeName)), n) {
		free = append(free, device{d})
	}
	if len(free) == 0 {
		return nil, broke(setupRule, "all %d devices of driver %s on node %s are allocated; the sanity checks need a free one", published, e.s.driver, e.s.cfg.NodeName)
	}
	return free, nil
}

// ranked leaves out the devices with a taint the scheduler would not
// allocate past, and puts ordinary devices first: shared and binding
// devices expect allocation details the scheduler fills in (share IDs,
// binding conditions), while an ordinary device tests the plugin without
// guessing them.
func ranked(devs []devices.Device) []devices.Device {
	devs = slices.DeleteFunc(slices.Clone(devs), func(d devices.Device) bool { return tainted(d.Device) })
	special := func(d devices.Device) bool {
		return ptr.Deref(d.AllowMultipleAllocations, false) || len(d.BindingConditions) > 0 || ptr.Deref(d.BindsToNode, false)
	}
	slices.SortStableFunc(devs, func(a, b devices.Device) int {
		if sa, sb := special(a), special(b); sa != sb {
			if sa {
				return 1
			}
			return -1
		}
		return cmp.Or(strings.Compare(a.Pool, b.Pool), strings.Compare(a.Name, b.Name))
	})
	return devs
}

// tainted reports a taint the scheduler would not allocate past.
func tainted(d resourceapi.Device) bool {
	return slices.ContainsFunc(d.Taints, func(t resourceapi.DeviceTaint) bool {
		return t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute
	})
}

// newClaim creates a claim for one device of the driver's class and
// allocates it the device, writing status.allocation as the scheduler
// would: NodePrepareResources reads the claim from the API server and
// refuses one that is not allocated.
func (e *env) newClaim(ctx context.Context, dev device) (*resourceapi.ResourceClaim, error) {
	claims := e.s.cfg.Client.ResourceV1().ResourceClaims(e.s.cfg.Namespace)
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: claimPrefix,
			Namespace:    e.s.cfg.Namespace,
			Labels:       map[string]string{managedByLabel: managedBy},
		},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: requestName,
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: e.s.class,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           1,
			},
		}}}},
	}
	c, err := claims.Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		return nil, broke(setupRule, "creating a ResourceClaim in namespace %s: %v", e.s.cfg.Namespace, err)
	}
	e.mu.Lock()
	e.claims = append(e.claims, c)
	e.mu.Unlock()

	c.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: requestName, Driver: e.s.driver, Pool: dev.Pool, Device: dev.Name,
		}}},
		NodeSelector: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{
			MatchFields: []v1.NodeSelectorRequirement{{Key: "metadata.name", Operator: v1.NodeSelectorOpIn, Values: []string{e.s.cfg.NodeName}}},
		}}},
	}
	allocated, err := claims.UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return nil, broke(setupRule, "allocating device %s to claim %s: %v", dev, klog.KObj(c), err)
	}
	if allocated.Status.Allocation == nil {
		return nil, broke(setupRule, "the API server dropped the allocation of claim %s", klog.KObj(c))
	}
	klog.FromContext(ctx).V(1).Info("Created claim", "claim", klog.KObj(allocated), "uid", allocated.UID, "device", dev.String())
	return allocated, nil
}

// newClaims creates one claim per device.
func (e *env) newClaims(ctx context.Context, devs []device) ([]*resourceapi.ResourceClaim, error) {
	var out []*resourceapi.ResourceClaim
	for _, d := range devs {
		c, err := e.newClaim(ctx, d)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

func ref(c *resourceapi.ResourceClaim) *drapb.Claim {
	return &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)}
}

// prepare calls NodePrepareResources for one claim and checks the answer
// against the claim's allocation; failures break rule.
func (e *env) prepare(ctx context.Context, rule string, c *resourceapi.ResourceClaim) ([]*drapb.Device, error) {
	if e.dra == nil {
		return nil, broke("registration", "no DRA endpoint to call")
	}
	e.mu.Lock()
	e.prepared[c.UID] = c
	e.mu.Unlock()

	timeout := e.s.prepareTimeout
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	resp, err := e.dra.NodePrepareResources(callCtx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{ref(c)}})
	klog.FromContext(ctx).V(1).Info("NodePrepareResources", "claim", klog.KObj(c), "elapsed", time.Since(start), "response", resp, "err", err)
	switch {
	case err != nil && ctx.Err() != nil:
		// The caller gave up, not the driver.
		return nil, broke(setupRule, "interrupted while preparing claim %s: %v", klog.KObj(c), context.Cause(ctx))
	case err != nil && callCtx.Err() != nil:
		return nil, broke(rule, "NodePrepareResources of claim %s did not answer within the prepare timeout %v", klog.KObj(c), timeout)
	case err != nil:
		return nil, broke(rule, "NodePrepareResources of claim %s failed: %v", klog.KObj(c), err)
	}
	got, ok := resp.GetClaims()[string(c.UID)]
	switch {
	case !ok || got == nil:
		return nil, broke(rule, "NodePrepareResources answered nothing for claim %s (uid %s), which the kubelet treats as a failure", klog.KObj(c), c.UID)
	case got.GetError() != "":
		return nil, broke(rule, "NodePrepareResources of claim %s: %s", klog.KObj(c), got.GetError())
	case len(got.GetDevices()) == 0:
		return nil, broke(rule, "NodePrepareResources of claim %s returned no device for request %q", klog.KObj(c), requestName)
	}
	if err := checkDevices(rule, c, e.s.driver, got.GetDevices()); err != nil {
		return nil, err
	}
	return got.GetDevices(), nil
}

// checkDevices compares prepared devices with the claim's allocation: the
// kubelet injects a device only into containers using a request it names,
// and only what was allocated may be handed out.
func checkDevices(rule string, c *resourceapi.ResourceClaim, driver string, devices []*drapb.Device) error {
	allocated := map[string]bool{}
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == driver {
			allocated[r.Pool+"/"+r.Device] = false
		}
	}
	var errs []error
	for _, d := range devices {
		key := d.GetPoolName() + "/" + d.GetDeviceName()
		if _, ok := allocated[key]; !ok {
			errs = append(errs, broke(rule, "claim %s: returned device %s is not allocated to the claim", klog.KObj(c), key))
			continue
		}
		allocated[key] = true
		if !slices.Contains(d.GetRequestNames(), requestName) {
			errs = append(errs, broke(rule, "claim %s: device %s is returned for requests %v, not for the claim's request %q", klog.KObj(c), key, d.GetRequestNames(), requestName))
		}
	}
	for key, returned := range allocated {
		if !returned {
			errs = append(errs, broke(rule, "claim %s: allocated device %s is not among the prepared devices", klog.KObj(c), key))
		}
	}
	return errors.Join(errs...)
}

// unprepare calls NodeUnprepareResources for one claim; failures break
// rule.
func (e *env) unprepare(ctx context.Context, rule string, c *resourceapi.ResourceClaim) error {
	if e.dra == nil {
		return broke("registration", "no DRA endpoint to call")
	}
	ctx, cancel := context.WithTimeout(ctx, e.s.prepareTimeout)
	defer cancel()
	resp, err := e.dra.NodeUnprepareResources(ctx, &drapb.NodeUnprepareResourcesRequest{Claims: []*drapb.Claim{ref(c)}})
	klog.FromContext(ctx).V(1).Info("NodeUnprepareResources", "claim", klog.KObj(c), "response", resp, "err", err)
	if err != nil {
		return broke(rule, "NodeUnprepareResources of claim %s failed: %v", klog.KObj(c), err)
	}
	got, ok := resp.GetClaims()[string(c.UID)]
	switch {
	case !ok || got == nil:
		return broke(rule, "NodeUnprepareResources answered nothing for claim %s (uid %s), which the kubelet treats as a failure", klog.KObj(c), c.UID)
	case got.GetError() != "":
		return broke(rule, "NodeUnprepareResources of claim %s: %s", klog.KObj(c), got.GetError())
	}
	e.mu.Lock()
	delete(e.prepared, c.UID)
	e.mu.Unlock()
	return nil
}

// cleanup unprepares what is still prepared, as the kubelet would before
// the claims go, then deletes the claims. It runs on a context of its own:
// the check's may be done, and leaving claims behind would take devices
// from the next check.
func (e *env) cleanup(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	defer e.closeConn()
	var errs []error
	e.mu.Lock()
	prepared := make([]*resourceapi.ResourceClaim, 0, len(e.prepared))
	for _, c := range e.prepared {
		prepared = append(prepared, c)
	}
	claims := e.claims
	e.mu.Unlock()
	for _, c := range prepared {
		if e.dra == nil {
			errs = append(errs, broke("unprepare-idempotent", "claim %s was left prepared: the driver could not be reached to unprepare it", klog.KObj(c)))
			continue
		}
		errs = append(errs, e.unprepare(ctx, "unprepare-idempotent", c))
	}
	for _, c := range claims {
		err := e.s.cfg.Client.ResourceV1().ResourceClaims(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &c.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, broke(setupRule, "deleting claim %s: %v", klog.KObj(c), err))
		}
	}
	return errors.Join(errs...)
}
