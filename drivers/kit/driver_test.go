package kit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"
	"tags.cncf.io/container-device-interface/pkg/cdi"
)

const (
	testDriver = "gpu.test.dev"
	testNode   = "node-a"
)

type staticInventory []Device

func (s staticInventory) Devices(context.Context) ([]Device, error) { return s, nil }

// nodeWide is an inventory with node-wide edits.
type nodeWide struct {
	staticInventory
	edits ContainerEdits
}

func (n nodeWide) NodeEdits() ContainerEdits { return n.edits }

// nodeEnv is the node-wide edit of the harness's inventory.
const nodeEnv = "GPU_NODE"

// nodeSpecFile and nodeDevice are the harness driver's node-wide CDI spec
// file and device.
const (
	nodeSpecFile = "test.dev-gpu.json"
	nodeDevice   = "test.dev/gpu=node"
)

func testDevices(n int) staticInventory {
	var devs staticInventory
	for i := range n {
		name := fmt.Sprintf("gpu-%d", i)
		devs = append(devs, Device{
			API:      resourceapi.Device{Name: name},
			Env:      map[string]string{"": name, "UUID": "uuid-" + name},
			ClaimEnv: map[string]string{"VISIBLE_DEVICES": "uuid-" + name},
		})
	}
	return devs
}

type harness struct {
	t      testing.TB
	dir    string
	opts   Options
	client *fake.Clientset
	driver *Driver
	conn   drapb.DRAPluginClient
}

// newHarness starts a driver with its real kubelet plugin server, and acts
// as the kubelet: it calls NodePrepareResources and NodeUnprepareResources
// over the driver's socket, with claims from a fake API server.
func newHarness(t testing.TB, devices int, mutate ...func(*Options)) *harness {
	t.Helper()
	dir, err := os.MkdirTemp("", "kit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The slice controller makes the node own its ResourceSlice.
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode, UID: "node-uid"}}
	h := &harness{t: t, dir: dir, client: fake.NewClientset(node)}
	h.opts = Options{
		DriverName: testDriver, NodeName: testNode, KubeClient: h.client,
		RegistrarDir: filepath.Join(dir, "registry"), PluginDir: filepath.Join(dir, "plugin"),
		CDIDir: filepath.Join(dir, "cdi"), CheckpointPath: filepath.Join(dir, "state", "checkpoint.json"),
		CDIKind: "test.dev/gpu", EnvPrefix: "GPU_DEVICE",
		Inventory: nodeWide{testDevices(devices), ContainerEdits{Env: map[string]string{nodeEnv: testNode}}},
	}
	for _, m := range mutate {
		m(&h.opts)
	}
	if err := os.MkdirAll(h.opts.RegistrarDir, 0o750); err != nil {
		t.Fatal(err)
	}
	h.start()
	return h
}

func (h *harness) start() {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h.t.Cleanup(cancel)
	d, err := Start(ctx, h.opts)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(d.Stop)
	h.driver = d
	h.conn = drapb.NewDRAPluginClient(h.dial(filepath.Join(h.opts.PluginDir, h.draSocket())))
}

func (h *harness) dial(socket string) *grpc.ClientConn {
	h.t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	return conn
}

// draSocket and registrarSocket are the file names the kubelet finds the
// driver's sockets by: with a rolling update, names of the pod's own.
func (h *harness) draSocket() string {
	if uid := h.opts.RollingUpdateUID; uid != "" {
		return "dra-" + string(uid) + ".sock"
	}
	return "dra.sock"
}

func (h *harness) registrarSocket() string {
	if uid := h.opts.RollingUpdateUID; uid != "" {
		return kubeletplugin.RollingUpdateRegistrarSocketFile(h.opts.RegistrarDir, h.opts.DriverName, uid)
	}
	return h.opts.DriverName + "-reg.sock"
}

// register does what the kubelet's plugin watcher does with a new
// registration socket: GetInfo, then NotifyRegistrationStatus.
func (h *harness) register() *registerapi.PluginInfo {
	h.t.Helper()
	client := registerapi.NewRegistrationClient(h.dial(filepath.Join(h.opts.RegistrarDir, h.registrarSocket())))
	info, err := client.GetInfo(context.Background(), &registerapi.InfoRequest{})
	if err != nil {
		h.t.Fatal(err)
	}
	if _, err := client.NotifyRegistrationStatus(context.Background(), &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		h.t.Fatal(err)
	}
	return info
}

// beside starts a second driver on the same node, directories and
// checkpoint, as the new pod of a rolling update, with its pod UID.
func (h *harness) beside(uid types.UID) *harness {
	n := &harness{t: h.t, dir: h.dir, client: h.client, opts: h.opts}
	n.opts.RollingUpdateUID = uid
	n.start()
	return n
}

// restart stops the driver and starts a new one on the same checkpoint.
func (h *harness) restart() {
	h.driver.Stop()
	h.start()
}

// claim creates an allocated claim in the fake API server.
func (h *harness) claim(name string, devices ...string) *resourceapi.ResourceClaim {
	h.t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		shared := strings.HasPrefix(d, "admin:")
		d = strings.TrimPrefix(d, "admin:")
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: testDriver, Pool: testNode, Device: d}
		if shared {
			r.AdminAccess = ptr.To(true)
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	c, err := h.client.ResourceV1().ResourceClaims("ns").Create(context.Background(), c, metav1.CreateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// updateStatus writes a claim's changed allocation.
func (h *harness) updateStatus(c *resourceapi.ResourceClaim) *resourceapi.ResourceClaim {
	h.t.Helper()
	c, err := h.client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(context.Background(), c, metav1.UpdateOptions{})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

func (h *harness) prepare(claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodePrepareResourceResponse {
	h.t.Helper()
	req := &drapb.NodePrepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	resp, err := h.conn.NodePrepareResources(context.Background(), req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Claims
}

func (h *harness) unprepare(claims ...*resourceapi.ResourceClaim) map[string]*drapb.NodeUnprepareResourceResponse {
	h.t.Helper()
	req := &drapb.NodeUnprepareResourcesRequest{}
	for _, c := range claims {
		req.Claims = append(req.Claims, &drapb.Claim{Namespace: c.Namespace, Name: c.Name, Uid: string(c.UID)})
	}
	resp, err := h.conn.NodeUnprepareResources(context.Background(), req)
	if err != nil {
		h.t.Fatal(err)
	}
	return resp.Claims
}

func (h *harness) specFiles() []string {
	entries, _ := os.ReadDir(h.opts.CDIDir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// containerEnv resolves CDI device IDs as a container runtime would.
func (h *harness) containerEnv(ids []string) []string {
	h.t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(h.opts.CDIDir), cdi.WithAutoRefresh(false))
	if err != nil {
		h.t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		h.t.Fatalf("CDI devices %v do not resolve: %v", ids, err)
	}
	return spec.Process.Env
}

// cdiIDs are the CDI devices of a prepared claim, as the kubelet hands
// them to the runtime: every device's, in order.
func cdiIDs(res *drapb.NodePrepareResourceResponse) []string {
	var ids []string
	for _, d := range res.Devices {
		ids = append(ids, d.CdiDeviceIds...)
	}
	return ids
}

func TestPrepareWritesCDISpecAndIsIdempotent(t *testing.T) {
	h := newHarness(t, 4)
	c := h.claim("one", "gpu-2", "gpu-3")
	first := h.prepare(c)[string(c.UID)]
	if first.Error != "" || len(first.Devices) != 2 {
		t.Fatalf("prepare = %+v", first)
	}
	env := strings.Join(h.containerEnv(cdiIDs(first)), "\n") + "\n"
	for _, want := range []string{"GPU_DEVICE_0=gpu-2", "GPU_DEVICE_0_UUID=uuid-gpu-2", "GPU_DEVICE_1=gpu-3", "VISIBLE_DEVICES=uuid-gpu-2,uuid-gpu-3\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("container env lacks %s:\n%s", want, env)
		}
	}
	again := h.prepare(c)[string(c.UID)]
	if again.Error != "" || fmt.Sprint(again.Devices) != fmt.Sprint(first.Devices) {
		t.Errorf("second prepare = %+v, want %+v", again, first)
	}
	if files := h.specFiles(); len(files) != 2 || !slices.Contains(files, nodeSpecFile) {
		t.Errorf("CDI specs after two prepares of one claim: %v, want the claim's and %s", files, nodeSpecFile)
	}
	if got := h.unprepare(c)[string(c.UID)]; got.Error != "" {
		t.Fatalf("unprepare: %s", got.Error)
	}
	if got := h.unprepare(c)[string(c.UID)]; got.Error != "" {
		t.Errorf("second unprepare: %s", got.Error)
	}
	if files := h.specFiles(); len(files) != 0 {
		t.Errorf("CDI specs left after unprepare: %v", files)
	}
}

func TestUnprepareUnknownClaim(t *testing.T) {
	h := newHarness(t, 1)
	ghost := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Namespace: "ns", UID: "uid-ghost"}}
	if got := h.unprepare(ghost)[string(ghost.UID)]; got == nil || got.Error != "" {
		t.Errorf("unprepare of a claim never prepared = %+v, want success", got)
	}
}

func TestPrepareRefusesDeviceHeldByAnotherClaim(t *testing.T) {
	h := newHarness(t, 2)
	a, b := h.claim("a", "gpu-0"), h.claim("b", "gpu-0")
	if got := h.prepare(a)[string(a.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	got := h.prepare(b)[string(b.UID)]
	if !strings.Contains(got.Error, "already prepared for claim ns/a") {
		t.Errorf("second claim on gpu-0: %q, want a refusal naming ns/a", got.Error)
	}
	// Admin access coexists with the allocation.
	admin := h.claim("monitor", "admin:gpu-0", "admin:gpu-1")
	if got := h.prepare(admin)[string(admin.UID)]; got.Error != "" {
		t.Errorf("admin-access claim: %s", got.Error)
	}
}

func TestPrepareUnknownDevice(t *testing.T) {
	h := newHarness(t, 1)
	c := h.claim("c", "gpu-7")
	if got := h.prepare(c)[string(c.UID)]; !strings.Contains(got.Error, `"gpu-7" is not in this node's inventory`) {
		t.Errorf("prepare of an unknown device: %q", got.Error)
	}
	if files := h.specFiles(); len(files) != 0 {
		t.Errorf("a failed prepare left CDI specs: %v", files)
	}
}

func TestRestartKeepsPreparedClaims(t *testing.T) {
	h := newHarness(t, 2)
	c := h.claim("c", "gpu-1")
	first := h.prepare(c)[string(c.UID)]
	h.restart()
	if got := h.driver.PreparedClaims(); len(got) != 1 || got[0] != c.UID {
		t.Fatalf("after restart the driver remembers %v, want [%s]", got, c.UID)
	}
	// The restarted driver still refuses the device to another claim…
	other := h.claim("other", "gpu-1")
	if got := h.prepare(other)[string(other.UID)]; got.Error == "" {
		t.Error("after restart gpu-1 was handed out twice")
	}
	// …answers a repeated prepare with the same devices…
	if got := h.prepare(c)[string(c.UID)]; fmt.Sprint(got.Devices) != fmt.Sprint(first.Devices) {
		t.Errorf("prepare after restart = %v, want %v", got.Devices, first.Devices)
	}
	// …and unprepares it.
	if got := h.unprepare(c)[string(c.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if files := h.specFiles(); len(files) != 0 {
		t.Errorf("CDI specs left: %v", files)
	}
}

func TestCorruptCheckpointIsAClearError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "checkpoint.json")
	opts := Options{DriverName: testDriver, NodeName: testNode, CDIDir: filepath.Join(dir, "cdi"), CheckpointPath: path, CDIKind: "test.dev/gpu", Inventory: testDevices(1)}
	for name, content := range map[string]string{
		"truncated":     `{"version": "dralab.dev/checkpoint/v1", "driver": "gpu.te`,
		"unknown field": `{"version": "dralab.dev/checkpoint/v1", "driver": "gpu.test.dev", "node": "node-a", "claims": {}, "extra": 1}`,
		"old version":   `{"version": "v0", "driver": "gpu.test.dev", "node": "node-a"}`,
		"other node":    `{"version": "dralab.dev/checkpoint/v1", "driver": "gpu.test.dev", "node": "node-b", "claims": {}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := newDriver(context.Background(), opts)
			if !errors.Is(err, ErrCorruptCheckpoint) || !strings.Contains(err.Error(), path) {
				t.Errorf("newDriver = %v, want ErrCorruptCheckpoint naming %s", err, path)
			}
		})
	}
}

func TestConcurrentPrepares(t *testing.T) {
	const n = 8
	h := newHarness(t, n)
	claims := make([]*resourceapi.ResourceClaim, n)
	for i := range n {
		claims[i] = h.claim(fmt.Sprintf("c%d", i), fmt.Sprintf("gpu-%d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for _, c := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := h.prepare(c)[string(c.UID)]; got.Error != "" {
				errs <- got.Error
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	h.restart()
	if got := len(h.driver.PreparedClaims()); got != n {
		t.Errorf("checkpoint holds %d claims after %d concurrent prepares", got, n)
	}
}

// A prepare must publish the node's devices too; the fake API server shows
// the ResourceSlice the driver wrote.
func TestPublishesNodeSlice(t *testing.T) {
	s := publishedSlice(t, newHarness(t, 3))
	if s.Spec.Driver != testDriver || s.Spec.Pool.Name != testNode || ptr.Deref(s.Spec.NodeName, "") != testNode || len(s.Spec.Devices) != 3 {
		t.Errorf("slice = %+v", s.Spec)
	}
	if s.Spec.Devices[0].Name != "gpu-0" || s.Spec.Devices[2].Name != "gpu-2" {
		t.Errorf("devices out of order: %v", s.Spec.Devices)
	}
	if len(s.Spec.SkipNodeOperations) != 0 {
		t.Errorf("a driver that prepares its devices publishes skipNodeOperations %v", s.Spec.SkipNodeOperations)
	}
}

// A driver whose devices need no work on the node says so in its slices:
// the kubelet then skips NodePrepareResources and NodeUnprepareResources.
func TestPublishesSkipNodeOperations(t *testing.T) {
	s := publishedSlice(t, newHarness(t, 2, func(o *Options) { o.SkipNodeOperations = true }))
	if !slices.Equal(s.Spec.SkipNodeOperations, []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}) || len(s.Spec.Devices) != 2 {
		t.Errorf("slice = %+v, want skipNodeOperations [*] and both devices", s.Spec)
	}
}

// publishedSlice waits for the harness driver's one ResourceSlice.
func publishedSlice(t *testing.T, h *harness) resourceapi.ResourceSlice {
	t.Helper()
	var slices *resourceapi.ResourceSliceList
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		var err error
		slices, err = h.client.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{})
		if err == nil && len(slices.Items) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if slices == nil || len(slices.Items) != 1 {
		t.Fatalf("slices = %v", slices)
	}
	return slices.Items[0]
}

// Opaque configuration addressed to the driver reaches the devices of the
// requests it names, class configuration first, the claim's overriding it;
// a configuration the driver refuses fails the claim with its error, and
// another driver's configuration is not the driver's business.
func TestOpaqueConfig(t *testing.T) {
	h := newHarness(t, 4, func(o *Options) {
		o.Configure = func(params []byte) (map[string]string, error) {
			if string(params) == `"bad"` {
				return nil, fmt.Errorf("bad parameters")
			}
			return map[string]string{"MODE": strings.Trim(string(params), `"`)}, nil
		}
	})
	opaque := func(source resourceapi.AllocationConfigSource, driver, params string, requests ...string) resourceapi.DeviceAllocationConfiguration {
		return resourceapi.DeviceAllocationConfiguration{Source: source, Requests: requests, DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: []byte(params)}}}}
	}
	c := h.claim("configured", "gpu-0")
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{
		opaque(resourceapi.AllocationConfigSourceClass, testDriver, `"class"`),
		opaque(resourceapi.AllocationConfigSourceClaim, testDriver, `"claim"`, "gpu"),
		opaque(resourceapi.AllocationConfigSourceClaim, "other.example.com", `"bad"`),
		opaque(resourceapi.AllocationConfigSourceClaim, testDriver, `"bad"`, "another-request"),
	}
	c = h.updateStatus(c)
	res := h.prepare(c)[string(c.UID)]
	if res.Error != "" {
		t.Fatalf("prepare: %s", res.Error)
	}
	env := strings.Join(h.containerEnv(res.Devices[0].CdiDeviceIds), "\n")
	if !strings.Contains(env, "GPU_DEVICE_0_MODE=claim") {
		t.Errorf("container env lacks the claim's configuration:\n%s", env)
	}

	bad := h.claim("misconfigured", "gpu-1")
	bad.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{opaque(resourceapi.AllocationConfigSourceClaim, testDriver, `"bad"`)}
	bad = h.updateStatus(bad)
	res = h.prepare(bad)[string(bad.UID)]
	if !strings.Contains(res.Error, "bad parameters") || !strings.Contains(res.Error, "ns/misconfigured") {
		t.Errorf("prepare of a misconfigured claim: error %q, want the driver's error naming the claim", res.Error)
	}
	if files := h.specFiles(); len(files) != 2 || !slices.Contains(files, nodeSpecFile) {
		t.Errorf("CDI specs: %v, want only the configured claim's and %s", files, nodeSpecFile)
	}
}

// Every prepared device lists the node-wide CDI device besides its own;
// a container gets the node-wide edits once whatever its claims; the spec
// is there exactly while a claim is prepared, is rewritten by a restarted
// driver with the node's edits of the day, and a lost one is written again.
func TestNodeWideDevice(t *testing.T) {
	h := newHarness(t, 3)
	a, b := h.claim("a", "gpu-0", "gpu-1"), h.claim("b", "gpu-2")
	res := h.prepare(a, b)
	resA, resB := res[string(a.UID)], res[string(b.UID)]
	if resA.Error != "" || resB.Error != "" {
		t.Fatalf("prepare: %q, %q", resA.Error, resB.Error)
	}
	own := map[string]string{}
	for name, r := range map[string]*drapb.NodePrepareResourceResponse{"a": resA, "b": resB} {
		for _, d := range r.Devices {
			if len(d.CdiDeviceIds) != 2 || d.CdiDeviceIds[1] != nodeDevice {
				t.Errorf("claim %s, device %s: CDI devices %q, want its own and then %s", name, d.DeviceName, d.CdiDeviceIds, nodeDevice)
				continue
			}
			if other, dup := own[d.CdiDeviceIds[0]]; dup {
				t.Errorf("CDI device %s is both claim %s's and claim %s's", d.CdiDeviceIds[0], other, name)
			}
			own[d.CdiDeviceIds[0]] = name
		}
	}
	env := h.containerEnv(append(cdiIDs(resA), cdiIDs(resB)...))
	if n := countPrefix(env, nodeEnv+"="); n != 1 || !slices.Contains(env, nodeEnv+"="+testNode) {
		t.Errorf("container of both claims: %s set %d times, want once to %s:\n%s", nodeEnv, n, testNode, strings.Join(env, "\n"))
	}
	if files := h.specFiles(); len(files) != 3 || !slices.Contains(files, nodeSpecFile) {
		t.Errorf("CDI specs of two claims: %v, want one per claim and %s", files, nodeSpecFile)
	}

	// A lost spec is written again when the kubelet prepares again.
	if err := os.Remove(filepath.Join(h.opts.CDIDir, nodeSpecFile)); err != nil {
		t.Fatal(err)
	}
	if got := h.prepare(a)[string(a.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if files := h.specFiles(); !slices.Contains(files, nodeSpecFile) {
		t.Errorf("CDI specs after a lost node spec and a prepare: %v", files)
	}

	// A restart rewrites it with the node's edits of the day; the kubelet's
	// CDI devices from before still resolve.
	h.opts.Inventory = nodeWide{testDevices(3), ContainerEdits{Env: map[string]string{nodeEnv: "renamed"}}}
	h.restart()
	if env := h.containerEnv(cdiIDs(resA)); !slices.Contains(env, nodeEnv+"=renamed") {
		t.Errorf("after a restart with new node edits, the container env is:\n%s", strings.Join(env, "\n"))
	}

	if got := h.unprepare(a)[string(a.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if files := h.specFiles(); len(files) != 2 || !slices.Contains(files, nodeSpecFile) {
		t.Errorf("CDI specs with claim b prepared: %v, want b's and %s", files, nodeSpecFile)
	}
	if got := h.unprepare(b)[string(b.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if files := h.specFiles(); len(files) != 0 {
		t.Errorf("CDI specs with no claim prepared: %v, want none", files)
	}
}

func countPrefix(list []string, prefix string) int {
	n := 0
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			n++
		}
	}
	return n
}

// An inventory without node-wide edits has no node-wide device.
func TestNoNodeWideDevice(t *testing.T) {
	h := newHarness(t, 1, func(o *Options) { o.Inventory = testDevices(1) })
	c := h.claim("c", "gpu-0")
	res := h.prepare(c)[string(c.UID)]
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	if ids := cdiIDs(res); len(ids) != 1 || ids[0] == nodeDevice {
		t.Errorf("CDI devices %q, want the claim's own only", ids)
	}
	if files := h.specFiles(); len(files) != 1 || slices.Contains(files, nodeSpecFile) {
		t.Errorf("CDI specs: %v, want the claim's only", files)
	}
}

// With a pod UID, the driver's sockets are named for its pod, and a second
// pod of a rolling update serves beside the first: the kubelet may prepare
// a claim through one and unprepare it through the other, so each reads
// the checkpoint afresh.
func TestRollingUpdate(t *testing.T) {
	const oldUID, newUID types.UID = "0b7c4e1e-3f0a-4d51-9c1b-2a6f1e1d9a01", "6d2f9a3c-8b4e-4f7a-a1c2-5e9b0d3f7c42"
	old := newHarness(t, 2, func(o *Options) { o.RollingUpdateUID = oldUID })
	next := old.beside(newUID)
	for _, h := range []*harness{old, next} {
		uid := h.opts.RollingUpdateUID
		dra := filepath.Join(h.opts.PluginDir, "dra-"+string(uid)+".sock")
		reg := filepath.Join(h.opts.RegistrarDir, kubeletplugin.RollingUpdateRegistrarSocketFile(h.opts.RegistrarDir, testDriver, uid))
		for _, socket := range []string{dra, reg} {
			if info, err := os.Stat(socket); err != nil || info.Mode()&os.ModeSocket == 0 {
				t.Errorf("pod %s: socket %s: %v", uid, socket, err)
			}
		}
		if info := h.register(); info.Name != testDriver || info.Endpoint != dra {
			t.Errorf("pod %s registers as %q at %s, want %q at %s", uid, info.Name, info.Endpoint, testDriver, dra)
		}
	}

	c, other := old.claim("c", "gpu-0"), old.claim("other", "gpu-0")
	if got := old.prepare(c)[string(c.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if got := next.prepare(other)[string(other.UID)]; !strings.Contains(got.Error, "already prepared for claim ns/c") {
		t.Errorf("the new pod prepared gpu-0 for a second claim: %q", got.Error)
	}
	if got := next.unprepare(c)[string(c.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if files := old.specFiles(); len(files) != 0 {
		t.Errorf("CDI specs after the new pod unprepared the old pod's claim: %v", files)
	}
	if got := old.prepare(other)[string(other.UID)]; got.Error != "" {
		t.Errorf("the old pod refuses gpu-0, freed by the new pod: %s", got.Error)
	}
}
