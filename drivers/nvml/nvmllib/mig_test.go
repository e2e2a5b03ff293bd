//go:build cgo

package nvmllib

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/dralab/dralab/drivers/fakegpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	dnvml "github.com/dralab/dralab/drivers/nvml"
)

// These tests run against go-nvml's DGX A100 mock server with MIG mode
// enabled. The mock creates and destroys GPU and compute instances, but
// has no MIG device handles (GetMaxMigDeviceCount,
// GetMigDeviceHandleByIndex): patchMock adds them at the nvmllib boundary,
// one per compute instance, so that prepare finds a MIG device's UUID as
// it does on a real GPU.

// migServer is a patched DGX A100 mock in MIG mode: the GPUs' "hardware",
// which outlives a driver's lister as a real machine's does.
func migServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := newMockServer("dgxa100-mig")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := patchMock(s, node); err != nil {
		t.Fatal(err)
	}
	return s
}

// NVML's GPU instance profiles become the same devices and counters as the
// fake driver's partitioning: mig, and the geometry NVML reports is the one
// the fake A100 40GB profile transcribes from NVIDIA's MIG user guide.
func TestMIGEnumeration(t *testing.T) {
	inv := &dnvml.Inventory{Lister: opened(t, migServer(t)), SysfsRoot: t.TempDir()}
	ctx := context.Background()
	devs, err := inv.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := inv.CounterSets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(sets) != 8 || sets[0].Name != "gpu-0-counters" {
		t.Fatalf("counter sets %d (first %q), want 8, one per GPU, gpu-0-counters first", len(sets), sets[0].Name)
	}
	var gpu0 []kit.Device
	for _, d := range devs {
		if d.API.Name == "gpu-0" || strings.HasPrefix(d.API.Name, "gpu-0-") {
			gpu0 = append(gpu0, d)
		}
	}
	// 1g.5gb ×7, 1g.5gb+me ×7, 1g.10gb ×4, 2g.10gb ×3, 3g.20gb ×2,
	// 4g.20gb, 7g.40gb and the whole GPU, which comes last.
	if len(gpu0) != 26 || gpu0[25].API.Name != "gpu-0" || gpu0[0].API.Name != "gpu-0-mig-1g5gb-0" {
		t.Fatalf("GPU 0's devices: %d, from %s to %s; want 26, from gpu-0-mig-1g5gb-0 to gpu-0", len(gpu0), gpu0[0].API.Name, gpu0[len(gpu0)-1].API.Name)
	}
	if _, err := kit.Slices(apiDevices(devs), sets); err != nil {
		t.Errorf("the API would refuse these slices: %v", err)
	}

	fake, err := fakegpu.LookupProfile("a100-40gb")
	if err != nil {
		t.Fatal(err)
	}
	nvmlInv := &dnvml.Inventory{Lister: opened(t, migServer(t)), SysfsRoot: t.TempDir()}
	gpus, err := nvmlInv.GPUs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := gpus[0].MIG
	if got == nil || got.MemorySlices != fake.MIG.MemorySlices || got.Engines != fake.MIG.Engines {
		t.Fatalf("GPU 0's MIG geometry %+v, want %d memory slices and engines %+v", got, fake.MIG.MemorySlices, fake.MIG.Engines)
	}
	for _, want := range fake.MIG.Profiles {
		i := slices.IndexFunc(got.Profiles, func(p gpu.MIGProfile) bool { return p.Name == want.Name })
		if i < 0 {
			t.Errorf("NVML reports no profile %s", want.Name)
			continue
		}
		p := got.Profiles[i]
		if p.Memory.Cmp(want.Memory) != 0 || p.Multiprocessors != want.Multiprocessors || p.Engines != want.Engines ||
			p.MemorySlices != want.MemorySlices || !slices.Equal(p.Placements, want.Placements) {
			t.Errorf("profile %s from NVML: %+v\nfrom the fake profile: %+v", want.Name, p, want)
		}
	}
	// The whole GPU consumes every counter, so no MIG device fits beside it.
	whole := gpu0[25].API
	if len(whole.ConsumesCounters) != 1 || len(whole.ConsumesCounters[0].Counters) != len(sets[0].Counters) {
		t.Errorf("the whole GPU consumes %v, want all of %v", whole.ConsumesCounters, sets[0].Counters)
	}
	mig := gpu0[0].API
	if a := mig.Attributes; *a["type"].StringValue != "mig" || *a["profile"].StringValue != "1g.5gb" || *a["parentUUID"].StringValue != gpu.DeviceUUID(node, 0) {
		t.Errorf("gpu-0-mig-1g5gb-0 attributes: %v", flatten(a))
	}
}

func apiDevices(devs []kit.Device) []resourceapi.Device {
	out := make([]resourceapi.Device, 0, len(devs))
	for _, d := range devs {
		out = append(out, d.API)
	}
	return out
}

// migDriver is the NVML driver's kit on a mock server, with what a test
// needs to act as the kubelet.
type migDriver struct {
	t      *testing.T
	dir    string
	server *server.Server
	driver *kit.Driver
	cancel context.CancelFunc
}

func startMIGDriver(t *testing.T, dir string, s *server.Server) *migDriver {
	t.Helper()
	opts := kit.Options{
		DriverName: "gpu.test.dev", NodeName: node,
		KubeClient:   fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}),
		RegistrarDir: filepath.Join(dir, "registry"), PluginDir: filepath.Join(dir, "plugin"),
		CDIDir: filepath.Join(dir, "cdi"), CheckpointPath: filepath.Join(dir, "checkpoint.json"),
		CDIKind: "test.dev/gpu", EnvPrefix: "GPU_DEVICE",
		Inventory: &dnvml.Inventory{Lister: opened(t, s), SysfsRoot: t.TempDir(), OmitDeviceNodes: true},
	}
	if err := os.MkdirAll(opts.RegistrarDir, 0o750); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d, err := kit.Start(ctx, opts)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	m := &migDriver{t: t, dir: dir, server: s, driver: d, cancel: cancel}
	t.Cleanup(m.stop)
	return m
}

func (m *migDriver) stop() {
	m.driver.Stop()
	m.cancel()
}

func migClaim(name string, devices ...string) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	c.Status.Allocation = &resourceapi.AllocationResult{}
	for _, d := range devices {
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
			resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.test.dev", Pool: node, Device: d})
	}
	return c
}

// prepare prepares a claim and returns its container's environment.
func (m *migDriver) prepare(c *resourceapi.ResourceClaim) []string {
	m.t.Helper()
	res, err := m.driver.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil {
		m.t.Fatal(err)
	}
	r := res[c.UID]
	if r.Err != nil {
		m.t.Fatalf("prepare %s: %v", c.Name, r.Err)
	}
	var ids []string
	for _, d := range r.Devices {
		ids = append(ids, d.CDIDeviceIDs...)
	}
	cache, err := cdi.NewCache(cdi.WithSpecDirs(filepath.Join(m.dir, "cdi")), cdi.WithAutoRefresh(false))
	if err != nil {
		m.t.Fatal(err)
	}
	spec := &oci.Spec{Process: &oci.Process{}}
	if _, err := cache.InjectDevices(spec, ids...); err != nil {
		m.t.Fatalf("CDI devices %q: %v", ids, err)
	}
	return spec.Process.Env
}

func (m *migDriver) unprepare(c *resourceapi.ResourceClaim) {
	m.t.Helper()
	res, err := m.driver.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: c.UID, NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}}})
	if err != nil {
		m.t.Fatal(err)
	}
	if err := res[c.UID]; err != nil {
		m.t.Fatalf("unprepare %s: %v", c.Name, err)
	}
}

// instances lists GPU i's GPU instances as "profile@start/compute instances".
func instances(s *server.Server, i int) []string {
	d := s.Devices[i].(*server.Device)
	d.RLock()
	defer d.RUnlock()
	var out []string
	for gi := range d.GpuInstances {
		gi.RLock()
		out = append(out, fmtInstance(gi.Info.ProfileId, gi.Info.Placement.Start, len(gi.ComputeInstances)))
		gi.RUnlock()
	}
	slices.Sort(out)
	return out
}

func fmtInstance[P, S ~int | ~uint32](profile P, start S, cis int) string {
	return fmt.Sprintf("%d@%d/%d", profile, start, cis)
}

func envValue(env []string, name string) string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			return v
		}
	}
	return ""
}

// Prepare creates the GPU and compute instance at the allocated placement
// and gives the container the MIG device's UUID; unprepare destroys them.
func TestMIGPrepareCreatesAndDestroysInstances(t *testing.T) {
	s := migServer(t)
	m := startMIGDriver(t, t.TempDir(), s)
	small, big := migClaim("small", "gpu-0-mig-1g5gb-2"), migClaim("big", "gpu-0-mig-3g20gb-4")
	envSmall, envBig := m.prepare(small), m.prepare(big)
	// Profile IDs as the mock gives them: 0 is one compute slice, 2 three.
	want := []string{fmtInstance(nvml.GPU_INSTANCE_PROFILE_1_SLICE, 2, 1), fmtInstance(nvml.GPU_INSTANCE_PROFILE_3_SLICE, 4, 1)}
	if got := instances(s, 0); !slices.Equal(got, want) {
		t.Fatalf("GPU 0's instances %v, want %v", got, want)
	}
	uSmall, uBig := envValue(envSmall, "NVIDIA_VISIBLE_DEVICES"), envValue(envBig, "NVIDIA_VISIBLE_DEVICES")
	if !strings.HasPrefix(uSmall, "MIG-") || !strings.HasPrefix(uBig, "MIG-") || uSmall == uBig {
		t.Errorf("NVIDIA_VISIBLE_DEVICES %q and %q, want two MIG device UUIDs", uSmall, uBig)
	}
	for name, want := range map[string]string{
		"GPU_DEVICE_0": "gpu-0-mig-1g5gb-2", "GPU_DEVICE_0_PROFILE": "1g.5gb", "GPU_DEVICE_0_UUID": uSmall,
		"GPU_DEVICE_0_PARENT_UUID": gpu.DeviceUUID(node, 0),
	} {
		if got := envValue(envSmall, name); got != want {
			t.Errorf("%s=%q, want %q", name, got, want)
		}
	}
	// The kubelet's repeated prepare makes nothing more.
	m.prepare(small)
	if got := instances(s, 0); len(got) != 2 {
		t.Errorf("after a repeated prepare GPU 0 has %v", got)
	}
	m.unprepare(small)
	if got := instances(s, 0); !slices.Equal(got, want[1:]) {
		t.Errorf("after unpreparing the 1g.5gb claim GPU 0 has %v, want %v", got, want[1:])
	}
	m.unprepare(big)
	m.unprepare(big)
	if got := instances(s, 0); len(got) != 0 {
		t.Errorf("after unpreparing both claims GPU 0 has %v", got)
	}
}

// A driver restarted with a prepared claim neither makes its instance
// again nor loses it: unprepare after the restart destroys it.
func TestMIGRestartKeepsInstances(t *testing.T) {
	s, dir := migServer(t), t.TempDir()
	m := startMIGDriver(t, dir, s)
	c := migClaim("c", "gpu-3-mig-2g10gb-2")
	before := envValue(m.prepare(c), "NVIDIA_VISIBLE_DEVICES")
	m.stop()
	m = startMIGDriver(t, dir, s)
	after := envValue(m.prepare(c), "NVIDIA_VISIBLE_DEVICES")
	want := []string{fmtInstance(nvml.GPU_INSTANCE_PROFILE_2_SLICE, 2, 1)}
	if got := instances(s, 3); !slices.Equal(got, want) || before != after {
		t.Fatalf("after a restart and the kubelet's prepare: GPU 3 has %v (want %v), UUID %s then %s", got, want, before, after)
	}
	m.unprepare(c)
	if got := instances(s, 3); len(got) != 0 {
		t.Errorf("after unprepare GPU 3 has %v", got)
	}
}

// A driver that stopped after creating an instance and before recording
// it destroys it when it starts again, and the kubelet's retry creates it
// once: no leak, no duplicate.
func TestMIGInterruptedPrepareLeaksNothing(t *testing.T) {
	s, dir := migServer(t), t.TempDir()
	m := startMIGDriver(t, dir, s)
	c := migClaim("c", "gpu-1-mig-4g20gb-0")
	m.prepare(c)
	m.stop()
	// Rewind the checkpoint to before the instance was recorded.
	cpPath := filepath.Join(dir, "checkpoint.json")
	cp, err := kit.ReadCheckpoint(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	pc := cp.Claims[c.UID]
	pc.Preparing, pc.CDISpec = true, ""
	pc.Devices[0].State, pc.Devices[0].Env, pc.Devices[0].ClaimEnv = nil, nil, nil
	data, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cpPath, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := instances(s, 1); len(got) != 1 {
		t.Fatalf("before the restart GPU 1 has %v, want the instance the interrupted prepare made", got)
	}
	m = startMIGDriver(t, dir, s)
	if got := instances(s, 1); len(got) != 0 {
		t.Errorf("after the restart GPU 1 still has %v", got)
	}
	m.prepare(c)
	if got := instances(s, 1); len(got) != 1 {
		t.Errorf("after the kubelet's retry GPU 1 has %v, want one instance", got)
	}
}

// A placement NVML does not offer is an error naming it, and creates nothing.
func TestMIGUnknownPlacement(t *testing.T) {
	s := migServer(t)
	l := opened(t, s)
	uuid := gpu.DeviceUUID(node, 0)
	_, err := l.CreateMIG(context.Background(), dnvml.MIGPlacement{ParentUUID: uuid, ProfileID: nvml.GPU_INSTANCE_PROFILE_3_SLICE, Start: 2})
	if err == nil || !strings.Contains(err.Error(), "no placement at memory slice 2") {
		t.Errorf("3g.20gb at slice 2: %v", err)
	}
	if err := l.DestroyMIG(context.Background(), dnvml.MIGPlacement{ParentUUID: uuid, ProfileID: nvml.GPU_INSTANCE_PROFILE_1_SLICE, Start: 0}); err != nil {
		t.Errorf("destroying what does not exist: %v", err)
	}
	if got := instances(s, 0); len(got) != 0 {
		t.Errorf("GPU 0 has %v", got)
	}
}

// CreateMIG where an earlier call made the instances adopts them.
func TestMIGCreateAdoptsWhatExists(t *testing.T) {
	s := migServer(t)
	l := opened(t, s)
	p := dnvml.MIGPlacement{ParentUUID: gpu.DeviceUUID(node, 5), ProfileID: nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, Start: 6}
	first, err := l.CreateMIG(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	second, err := l.CreateMIG(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fmtInstance(nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV2, 6, 1)}
	if got := instances(s, 5); !slices.Equal(got, want) || first != second {
		t.Errorf("two creates at one placement: GPU 5 has %v (want %v); instances %+v and %+v", got, want, first, second)
	}
}
