// Package kit is what every dralab DRA driver shares: an inventory of
// devices is published as ResourceSlices through
// k8s.io/dynamic-resource-allocation/kubeletplugin, and claims are prepared
// by writing one CDI spec per claim with the CDI library and remembered in
// an atomically written checkpoint, so that a restarted driver neither
// forgets a prepared claim nor prepares one twice. What the whole node's
// containers share (a GPU driver's control device files) is one more CDI
// device, the same for every claim. Drivers differ only in their Inventory.
package kit

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	metadatav1beta1 "k8s.io/dynamic-resource-allocation/api/metadata/v1beta1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"

	"github.com/dralab/dralab/internal/natural"
)

// Options configure a driver on one node.
type Options struct {
	DriverName string
	NodeName   string
	KubeClient kubernetes.Interface
	// RegistrarDir is the kubelet's plugin registration directory;
	// PluginDir holds the driver's DRA socket.
	RegistrarDir string
	PluginDir    string
	// CDIDir is the CDI spec directory the container runtime reads.
	CDIDir string
	// CheckpointPath is the checkpoint file; it must survive restarts.
	CheckpointPath string
	// CDIKind is the CDI device kind, "vendor/class".
	CDIKind string
	// EnvPrefix names the per-device environment variables.
	EnvPrefix string
	Inventory Inventory
	// Configure turns an opaque configuration addressed to the driver (in a
	// DeviceClass or a claim) into variables of the devices it applies to,
	// keyed like Device.Env; an error fails the claim's preparation. Nil:
	// the driver takes no configuration and refuses any.
	Configure func(parameters []byte) (map[string]string, error)
	// RollingUpdateUID is the driver pod's UID, as a DaemonSet passes it
	// from the downward API. With it the pod's sockets carry the UID, so
	// that the kubelet talks to the new pod of a rolling update beside the
	// old one, and the driver reads the checkpoint afresh on every call, as
	// the other pod may have changed it; the kubelet plugin helper
	// serializes the two pods' calls with a file lock.
	RollingUpdateUID types.UID
	// Metrics, if set, count the driver's prepares and unprepares.
	Metrics *Metrics
	// DevicesPerSlice is the most devices the driver publishes in one
	// slice: a pool of many slices. 0: as many as the API allows.
	DevicesPerSlice int
	// SkipNodeOperations publishes the node's slices as needing no work
	// on the node (skipNodeOperations: ["*"], Kubernetes 1.37's
	// DRAOptionalNodeOperations): the kubelet then calls neither
	// NodePrepareResources nor NodeUnprepareResources for a claim of only
	// these devices, and its containers get no CDI edits from them. An API
	// server without the gate drops the field, which the slice controller
	// reports as an error.
	SkipNodeOperations bool
	// ReportHealth serves the kubelet's device health stream: every device
	// is healthy until the driver's monitor says otherwise through
	// SetDeviceHealth. Without it the driver declines the stream.
	ReportHealth bool
	// DeviceMetadata has the kubelet plugin helper give each container of
	// a claim a file of its devices' attributes (KEP-5304, beta in 1.37):
	// per request, a metadata file in the plugin's data directory and a CDI
	// spec in CDIDir that mounts it at
	// /var/run/kubernetes.io/dra-device-attributes/…/metadata.json, written
	// at prepare and removed at unprepare. The attributes are the ones the
	// device publishes in the ResourceSlice.
	DeviceMetadata bool
	// PartitionTypeAttribute, a fully qualified attribute name, is the
	// partitionTypeAttribute of every slice with devices that consume
	// counters (Kubernetes 1.37's DRAPartitionableDevicesType, alpha: an
	// API server without the gate drops it): each such device carries the
	// attribute, its value naming the device's partition type, which a
	// pool status request counts by. Empty: none.
	PartitionTypeAttribute string
}

// MetadataVersions are the versions the device metadata files are
// written in, newest first: metadata.resource.k8s.io/v1beta1, the one
// Kubernetes 1.37 has. A consumer reads the first object it understands.
var MetadataVersions = []schema.GroupVersion{metadatav1beta1.SchemeGroupVersion}

// Driver is a running DRA kubelet plugin.
type Driver struct {
	opts    Options
	helper  *kubeletplugin.Helper
	cdi     *cdi.Cache
	devices map[string]Device
	// order is the devices' names in the inventory's order.
	order []string
	// health is what the driver's monitor last said of the devices.
	health deviceHealth
	// counterSets are a CounterInventory's, by name; sets is their order.
	counterSets map[string]resourceapi.CounterSet
	sets        []resourceapi.CounterSet
	// slices are the node's pool as published.
	slicesMu sync.Mutex
	slices   []resourceslice.Slice
	// nodeEdits are the node-wide edits, nodeDevice their CDI device ID
	// ("" without any), nodeSpec the name of their spec file.
	nodeEdits  ContainerEdits
	nodeDevice string
	nodeSpec   string

	// registered is the kubelet's last word on the registration;
	// published becomes true once the node's slices are seen in the API.
	registered atomic.Bool
	published  atomic.Bool

	mu sync.Mutex
	cp *Checkpoint
}

// Start enumerates the inventory, loads the checkpoint, registers with the
// kubelet and publishes the node's ResourceSlice.
func Start(ctx context.Context, opts Options) (*Driver, error) {
	d, err := newDriver(ctx, opts)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.PluginDir, 0o750); err != nil {
		return nil, err
	}
	d.helper, err = kubeletplugin.Start(ctx, d,
		kubeletplugin.KubeClient(opts.KubeClient),
		kubeletplugin.NodeName(opts.NodeName),
		kubeletplugin.DriverName(opts.DriverName),
		kubeletplugin.RegistrarDirectoryPath(opts.RegistrarDir),
		kubeletplugin.PluginDataDirectoryPath(opts.PluginDir),
		kubeletplugin.HealthService(opts.ReportHealth),
		kubeletplugin.RollingUpdate(opts.RollingUpdateUID),
		kubeletplugin.GRPCInterceptor(d.watchRegistration),
		kubeletplugin.EnableDeviceMetadata(opts.DeviceMetadata, MetadataVersions),
		kubeletplugin.CDIDirectory(opts.CDIDir),
	)
	if err != nil {
		return nil, fmt.Errorf("starting the kubelet plugin: %w", err)
	}
	if err := d.helper.PublishResources(ctx, d.resources()); err != nil {
		d.helper.Stop()
		return nil, fmt.Errorf("publishing ResourceSlices: %w", err)
	}
	return d, nil
}

// newDriver prepares everything but the kubelet plugin: what unit tests of
// Prepare and Unprepare need.
func newDriver(ctx context.Context, opts Options) (*Driver, error) {
	for name, v := range map[string]string{"driver name": opts.DriverName, "node name": opts.NodeName, "CDI directory": opts.CDIDir, "checkpoint path": opts.CheckpointPath, "CDI kind": opts.CDIKind} {
		if v == "" {
			return nil, fmt.Errorf("driver options: %s is empty", name)
		}
	}
	if opts.EnvPrefix == "" {
		opts.EnvPrefix = "DEVICE"
	}
	devs, err := opts.Inventory.Devices(ctx)
	if err != nil {
		return nil, fmt.Errorf("enumerating devices: %w", err)
	}
	d := &Driver{opts: opts, devices: map[string]Device{}, counterSets: map[string]resourceapi.CounterSet{}}
	d.health = deviceHealth{faults: map[string]DeviceFault{}, since: map[string]time.Time{}, changed: make(chan struct{})}
	apiDevs := make([]resourceapi.Device, 0, len(devs))
	var reached []resourceapi.Device
	for _, dev := range devs {
		// Names are unique over every pool the plugin prepares: the
		// kubelet's health stream and the driver's faults name devices.
		if _, dup := d.devices[dev.API.Name]; dup {
			return nil, fmt.Errorf("inventory lists device %q twice", dev.API.Name)
		}
		d.devices[dev.API.Name] = dev
		d.order = append(d.order, dev.API.Name)
		d.health.since[dev.API.Name] = time.Now()
		if dev.Pool == "" {
			apiDevs = append(apiDevs, dev.API)
			continue
		}
		// Counters are a pool's, published with its devices by whoever
		// publishes the pool.
		if len(dev.API.ConsumesCounters) > 0 {
			return nil, fmt.Errorf("inventory: device %q of pool %q consumes counters; only the node's own devices may", dev.API.Name, dev.Pool)
		}
		reached = append(reached, dev.API)
	}
	if err := CheckNames(opts.DriverName, reached); err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	opts.Metrics.setHealth(len(d.order), 0, 0)
	if ci, ok := opts.Inventory.(CounterInventory); ok {
		if d.sets, err = ci.CounterSets(ctx); err != nil {
			return nil, fmt.Errorf("enumerating counter sets: %w", err)
		}
		for _, s := range d.sets {
			d.counterSets[s.Name] = s
		}
	}
	if err := CheckNames(opts.DriverName, apiDevs); err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	if d.slices, err = SlicesOf(apiDevs, d.sets, opts.DevicesPerSlice); err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	if err := os.MkdirAll(opts.CDIDir, 0o755); err != nil {
		return nil, err
	}
	d.cdi, err = cdi.NewCache(cdi.WithSpecDirs(opts.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI directory %s: %w", opts.CDIDir, err)
	}
	d.cp, err = loadCheckpoint(opts.CheckpointPath, opts.DriverName, opts.NodeName)
	if err != nil {
		return nil, err
	}
	if err := d.abandonUnfinished(ctx); err != nil {
		return nil, err
	}
	d.nodeSpec = cdi.GenerateSpecName(parser.ParseQualifier(opts.CDIKind)) + ".json"
	if nw, ok := opts.Inventory.(NodeWideInventory); ok {
		if d.nodeEdits = nw.NodeEdits(); !d.nodeEdits.empty() {
			d.nodeDevice = opts.CDIKind + "=" + nodeDeviceName
		}
	}
	// Rewritten: the node's edits may have changed since the spec was.
	if err := d.syncNodeSpec(true); err != nil {
		return nil, fmt.Errorf("node-wide CDI spec: %w", err)
	}
	d.opts.Metrics.setPrepared(len(d.cp.Claims))
	klog.FromContext(ctx).Info("Driver ready", "driver", opts.DriverName, "node", opts.NodeName, "devices", len(d.devices), "counterSets", len(d.sets), "preparedClaims", len(d.cp.Claims), "nodeDevice", d.nodeDevice)
	return d, nil
}

// Stop unregisters from the kubelet and stops serving. Published slices
// stay: the kubelet or the control plane removes them when the node goes.
func (d *Driver) Stop() {
	if d.helper != nil {
		d.helper.Stop()
	}
}

// resources is the node's single pool, named after the node, in as many
// slices as the API's limits need.
func (d *Driver) resources() resourceslice.DriverResources {
	d.slicesMu.Lock()
	defer d.slicesMu.Unlock()
	pool := d.slices
	if d.opts.SkipNodeOperations || d.opts.PartitionTypeAttribute != "" {
		pool = slices.Clone(pool)
	}
	for i := range pool {
		if d.opts.SkipNodeOperations {
			pool[i].SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}
		}
		partitioned := slices.ContainsFunc(pool[i].Devices, func(dev resourceapi.Device) bool { return len(dev.ConsumesCounters) > 0 })
		if d.opts.PartitionTypeAttribute != "" && partitioned {
			pool[i].PartitionTypeAttribute = ptr.To(resourceapi.FullyQualifiedName(d.opts.PartitionTypeAttribute))
		}
	}
	if len(pool) == 1 && len(pool[0].Devices) == 0 && len(pool[0].SharedCounters) == 0 && d.ownDevices() < len(d.devices) {
		// Only devices of other pools: the node has no pool of its own
		// (an empty one says a node has no devices of the driver).
		return resourceslice.DriverResources{}
	}
	return resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{d.opts.NodeName: {Slices: pool}},
	}
}

// PreparedClaims returns the UIDs of the prepared claims.
func (d *Driver) PreparedClaims() []types.UID {
	d.mu.Lock()
	defer d.mu.Unlock()
	var uids []types.UID
	for uid := range d.cp.Claims {
		uids = append(uids, uid)
	}
	return uids
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.reload(); err != nil {
		return nil, err
	}
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		start := time.Now()
		devices, err := d.prepare(ctx, claim)
		d.opts.Metrics.observe(opPrepare, start, err)
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: devices, Err: err}
	}
	d.opts.Metrics.setPrepared(len(d.cp.Claims))
	return results, nil
}

// reload reads the checkpoint afresh during a rolling update, when the
// other pod of the driver may have prepared or unprepared claims since.
func (d *Driver) reload() error {
	if d.opts.RollingUpdateUID == "" {
		return nil
	}
	cp, err := loadCheckpoint(d.opts.CheckpointPath, d.opts.DriverName, d.opts.NodeName)
	if err != nil {
		return err
	}
	d.cp = cp
	return nil
}

func (d *Driver) prepare(ctx context.Context, claim *resourceapi.ResourceClaim) ([]kubeletplugin.Device, error) {
	logger := klog.FromContext(ctx).WithValues("claim", klog.KObj(claim), "uid", claim.UID)
	if prepared, ok := d.cp.Claims[claim.UID]; ok && prepared.Preparing {
		// An earlier attempt failed to undo what it began: undo it now,
		// then prepare afresh.
		if err := d.abandon(ctx, claim.UID, prepared); err != nil {
			return nil, err
		}
	} else if ok {
		// Idempotent: the kubelet asks again after its own restart.
		if err := d.ensureSpec(claim.UID, prepared); err != nil {
			return nil, err
		}
		if err := d.syncNodeSpec(false); err != nil {
			return nil, fmt.Errorf("node-wide CDI spec: %w", err)
		}
		logger.V(2).Info("Claim already prepared")
		return d.pluginDevices(prepared.Devices), nil
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", klog.KObj(claim))
	}
	prepared := &PreparedClaim{Namespace: claim.Namespace, Name: claim.Name}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != d.opts.DriverName {
			continue
		}
		dev, ok := d.devices[r.Device]
		if !ok {
			return nil, fmt.Errorf("claim %s: device %q is not in this node's inventory", klog.KObj(claim), r.Device)
		}
		if pool := d.poolOf(dev); r.Pool != pool {
			return nil, fmt.Errorf("claim %s: device %s is in pool %q, not in the pool %q this node has it of", klog.KObj(claim), r.Device, r.Pool, pool)
		}
		shared := (r.AdminAccess != nil && *r.AdminAccess) || r.ShareID != nil
		if uid, other := d.cp.holder(r.Pool, r.Device, claim.UID, shared); other != nil {
			return nil, fmt.Errorf("claim %s: device %s is already prepared for claim %s/%s (%s); refusing to hand it out twice",
				klog.KObj(claim), r.Device, other.Namespace, other.Name, uid)
		}
		configEnv, err := d.configEnv(claim, r.Request)
		if err != nil {
			return nil, err
		}
		pd := PreparedDevice{
			Requests: []string{r.Request}, Pool: r.Pool, Device: r.Device, Shared: shared, ConfigEnv: configEnv,
		}
		if r.ShareID != nil {
			pd.ShareID = string(*r.ShareID)
			for name, q := range r.ConsumedCapacity {
				if pd.ConsumedCapacity == nil {
					pd.ConsumedCapacity = map[string]resource.Quantity{}
				}
				pd.ConsumedCapacity[string(name)] = q
			}
		}
		pd.CDIDeviceIDs = []string{d.opts.CDIKind + "=" + cdiDeviceName(claim.UID, pd)}
		prepared.Devices = append(prepared.Devices, pd)
	}
	if err := d.counterConflict(claim.UID, prepared.Devices); err != nil {
		return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
	}
	if err := d.prepareDevices(ctx, claim.UID, prepared); err != nil {
		return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), err)
	}
	spec, err := d.specOf(claim.UID, prepared)
	if err == nil {
		var specName string
		specName, err = cdi.GenerateNameForTransientSpec(spec, string(claim.UID))
		prepared.CDISpec = specName + ".json"
	}
	if err == nil {
		if err = d.cdi.WriteSpec(spec, prepared.CDISpec); err != nil {
			err = fmt.Errorf("writing CDI spec: %w", err)
		}
	}
	if err == nil {
		prepared.Preparing = false
		d.cp.Claims[claim.UID] = prepared
		if err = d.cp.save(d.opts.CheckpointPath); err != nil {
			_ = d.removeSpec(prepared.CDISpec)
			err = fmt.Errorf("checkpointing: %w", err)
		}
	}
	if err != nil {
		prepared.Preparing = true
		return nil, fmt.Errorf("claim %s: %w", klog.KObj(claim), errors.Join(err, d.abandon(ctx, claim.UID, prepared)))
	}
	// After the checkpoint: a claim that fails here is prepared but for
	// the node's spec, which the kubelet's retry writes.
	if err := d.syncNodeSpec(false); err != nil {
		return nil, fmt.Errorf("node-wide CDI spec: %w", err)
	}
	d.writeClaimStatus(ctx, claim.Namespace, claim.Name, prepared)
	logger.V(1).Info("Prepared claim", "devices", len(prepared.Devices))
	return d.pluginDevices(prepared.Devices), nil
}

// configEnv is what the opaque configurations addressed to this driver make
// of the claim's request, in the allocation's order (class before claim),
// later ones overriding earlier ones.
func (d *Driver) configEnv(claim *resourceapi.ResourceClaim, request string) (map[string]string, error) {
	var env map[string]string
	for i, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != d.opts.DriverName || !appliesTo(c.Requests, request) {
			continue
		}
		if d.opts.Configure == nil {
			return nil, fmt.Errorf("claim %s: configuration %d (%s): driver %s takes no configuration", klog.KObj(claim), i, c.Source, d.opts.DriverName)
		}
		vars, err := d.opts.Configure(c.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("claim %s: configuration %d (%s) for request %s: %w", klog.KObj(claim), i, c.Source, request, err)
		}
		for k, v := range vars {
			if env == nil {
				env = map[string]string{}
			}
			env[k] = v
		}
	}
	return env, nil
}

// appliesTo says whether a configuration for requests (none: all) applies
// to a result's request; naming a request covers its subrequests.
func appliesTo(requests []string, result string) bool {
	if len(requests) == 0 {
		return true
	}
	for _, r := range requests {
		if r == result || strings.HasPrefix(result, r+"/") {
			return true
		}
	}
	return false
}

// devicesOf returns a prepared claim's devices that are in the inventory,
// with the claim variables their preparation added.
func (d *Driver) devicesOf(c *PreparedClaim) []Device {
	var out []Device
	for _, pd := range c.Devices {
		dev, ok := d.devices[pd.Device]
		if !ok {
			continue
		}
		if len(pd.ClaimEnv) > 0 {
			env := maps.Clone(dev.ClaimEnv)
			if env == nil {
				env = map[string]string{}
			}
			maps.Copy(env, pd.ClaimEnv)
			dev.ClaimEnv = env
		}
		out = append(out, dev)
	}
	return out
}

// prepareDevices has a DevicePreparer ready a claim's devices, after
// checkpointing the claim as Preparing. On failure it undoes what it did.
func (d *Driver) prepareDevices(ctx context.Context, uid types.UID, c *PreparedClaim) error {
	p, ok := d.opts.Inventory.(DevicePreparer)
	if !ok {
		return nil
	}
	c.Preparing = true
	d.cp.Claims[uid] = c
	if err := d.cp.save(d.opts.CheckpointPath); err != nil {
		delete(d.cp.Claims, uid)
		return fmt.Errorf("checkpointing the claim before preparing its devices: %w", err)
	}
	for i := range c.Devices {
		pd := &c.Devices[i]
		res, err := p.PrepareDevice(ctx, pd.Device)
		if err != nil {
			return errors.Join(fmt.Errorf("preparing device %s: %w", pd.Device, err), d.abandon(ctx, uid, c))
		}
		pd.State, pd.Env, pd.ClaimEnv, pd.StatusData = res.State, res.Env, res.ClaimEnv, res.StatusData
	}
	return nil
}

// abandon undoes a claim's device preparations, newest first (what has no
// state is undone from the device alone), and forgets the claim. If an undo
// fails the claim stays checkpointed as Preparing, for the next attempt.
func (d *Driver) abandon(ctx context.Context, uid types.UID, c *PreparedClaim) error {
	p, preparer := d.opts.Inventory.(DevicePreparer)
	if preparer {
		for i := len(c.Devices) - 1; i >= 0; i-- {
			pd := c.Devices[i]
			if err := p.UnprepareDevice(ctx, pd.Device, pd.State); err != nil {
				return fmt.Errorf("undoing the preparation of device %s: %w", pd.Device, err)
			}
		}
	}
	delete(d.cp.Claims, uid)
	if err := d.cp.save(d.opts.CheckpointPath); err != nil {
		if preparer {
			// On disk it is still Preparing: so it stays here.
			d.cp.Claims[uid] = c
		}
		return fmt.Errorf("checkpointing the abandoned claim: %w", err)
	}
	return nil
}

// abandonUnfinished undoes the preparations a driver stopped in the middle
// of: the kubelet asks again, and the claim is prepared afresh.
func (d *Driver) abandonUnfinished(ctx context.Context) error {
	for uid, c := range d.cp.Claims {
		if !c.Preparing {
			continue
		}
		klog.FromContext(ctx).Info("Undoing a claim's preparation that the driver stopped in the middle of", "claim", klog.KRef(c.Namespace, c.Name), "uid", uid)
		if err := d.abandon(ctx, uid, c); err != nil {
			return fmt.Errorf("claim %s/%s (%s) was being prepared when the driver stopped: %w", c.Namespace, c.Name, uid, err)
		}
	}
	return nil
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Unknown
// claims are not an error: unprepare is idempotent.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.reload(); err != nil {
		return nil, err
	}
	results := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		start := time.Now()
		err := d.unprepare(ctx, c)
		d.opts.Metrics.observe(opUnprepare, start, err)
		results[c.UID] = err
	}
	d.opts.Metrics.setPrepared(len(d.cp.Claims))
	return results, nil
}

func (d *Driver) unprepare(ctx context.Context, c kubeletplugin.NamespacedObject) error {
	prepared, ok := d.cp.Claims[c.UID]
	if !ok {
		// The retry of an unprepare whose node spec removal failed.
		return d.syncNodeSpec(false)
	}
	if p, ok := d.opts.Inventory.(DevicePreparer); ok {
		for i := len(prepared.Devices) - 1; i >= 0; i-- {
			pd := prepared.Devices[i]
			if err := p.UnprepareDevice(ctx, pd.Device, pd.State); err != nil {
				return fmt.Errorf("claim %s: unpreparing device %s: %w", c.NamespacedName, pd.Device, err)
			}
		}
	}
	if err := d.removeSpec(prepared.CDISpec); err != nil {
		return fmt.Errorf("removing CDI spec of claim %s: %w", c.NamespacedName, err)
	}
	delete(d.cp.Claims, c.UID)
	if err := d.cp.save(d.opts.CheckpointPath); err != nil {
		d.cp.Claims[c.UID] = prepared
		return fmt.Errorf("checkpointing claim %s: %w", c.NamespacedName, err)
	}
	if err := d.syncNodeSpec(false); err != nil {
		return fmt.Errorf("claim %s unprepared, but the node-wide CDI spec: %w", c.NamespacedName, err)
	}
	d.clearClaimStatus(ctx, c.Namespace, c.Name)
	klog.FromContext(ctx).V(1).Info("Unprepared claim", "claim", c.NamespacedName, "uid", c.UID)
	return nil
}

// HandleError implements kubeletplugin.DRAPlugin.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	runtime.HandleErrorWithContext(ctx, err, msg)
}

// pluginDevices are a claim's devices as the kubelet gets them: each with
// its own CDI device and the node-wide one, which is not checkpointed, as
// it is the driver's configuration and not the claim's.
func (d *Driver) pluginDevices(in []PreparedDevice) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(in))
	for _, pd := range in {
		ids := pd.CDIDeviceIDs
		if d.nodeDevice != "" {
			ids = append(slices.Clip(ids), d.nodeDevice)
		}
		dev := kubeletplugin.Device{Requests: pd.Requests, PoolName: pd.Pool, DeviceName: pd.Device, CDIDeviceIDs: ids}
		if inv, ok := d.devices[pd.Device]; ok && d.opts.DeviceMetadata {
			attrs := make(map[string]resourceapi.DeviceAttribute, len(inv.API.Attributes))
			for name, a := range inv.API.Attributes {
				attrs[string(name)] = a
			}
			dev.Metadata = &kubeletplugin.DeviceMetadata{Attributes: attrs}
		}
		if pd.ShareID != "" {
			dev.ShareID = ptr.To(types.UID(pd.ShareID))
		}
		out = append(out, dev)
	}
	return out
}

// sortDeviceNames orders names like gpu-2 before gpu-10.
func sortDeviceNames(names []string) {
	sort.Slice(names, func(i, j int) bool { return natural.Less(names[i], names[j]) })
}
