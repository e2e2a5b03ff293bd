package nvml

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/dralab/dralab/drivers/kit"
)

// A container of a claim gets its GPU's device file and the control files
// once, the latter from the node-wide CDI device every claim lists: what
// a runtime makes of the claim's CDI devices with the CDI library. The
// device files are FIFOs in a device root of the test's own, as the
// library stats each file on the host.
func TestControlFilesAreNodeWide(t *testing.T) {
	dir := t.TempDir()
	devRoot := filepath.Join(dir, "dev")
	if err := os.Mkdir(devRoot, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"} {
		if err := syscall.Mkfifo(filepath.Join(devRoot, name), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	const node = "node-a"
	opts := kit.Options{
		DriverName: "gpu.test.dev", NodeName: node,
		KubeClient:   fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}),
		RegistrarDir: filepath.Join(dir, "registry"), PluginDir: filepath.Join(dir, "plugin"),
		CDIDir: filepath.Join(dir, "cdi"), CheckpointPath: filepath.Join(dir, "checkpoint.json"),
		CDIKind: "test.dev/gpu", EnvPrefix: "GPU_DEVICE",
		Inventory: &Inventory{
			Lister:    fixed(h100(0, 0, "00000000:1B:00.0"), h100(1, 1, "00000000:43:00.0")),
			SysfsRoot: t.TempDir(), DevRoot: devRoot,
		},
	}
	if err := os.MkdirAll(opts.RegistrarDir, 0o750); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := kit.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()

	claim := func(name, device string) *resourceapi.ResourceClaim {
		c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
		c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: opts.DriverName, Pool: node, Device: device}},
		}}
		return c
	}
	a, b := claim("a", "gpu-0"), claim("b", "gpu-1")
	results, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{a, b})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[types.UID][]string{}
	for uid, r := range results {
		if r.Err != nil {
			t.Fatalf("prepare of %s: %v", uid, r.Err)
		}
		for _, dev := range r.Devices {
			ids[uid] = append(ids[uid], dev.CDIDeviceIDs...)
		}
	}
	nodeDevice := "test.dev/gpu=node"
	for uid, got := range ids {
		if len(got) != 2 || got[1] != nodeDevice {
			t.Errorf("claim %s: CDI devices %q, want its own and then %s", uid, got, nodeDevice)
		}
	}
	if ids[a.UID][0] == ids[b.UID][0] {
		t.Errorf("claims a and b share their own CDI device %s", ids[a.UID][0])
	}

	for _, tc := range []struct {
		name   string
		claims []types.UID
		want   []string
	}{
		{"claim a", []types.UID{a.UID}, []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidiactl"}},
		{"claims a and b", []types.UID{a.UID, b.UID}, []string{"/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0", "/dev/nvidia1", "/dev/nvidiactl"}},
	} {
		var devices []string
		for _, uid := range tc.claims {
			devices = append(devices, ids[uid]...)
		}
		cache, err := cdi.NewCache(cdi.WithSpecDirs(opts.CDIDir), cdi.WithAutoRefresh(false))
		if err != nil {
			t.Fatal(err)
		}
		spec := &oci.Spec{Process: &oci.Process{}}
		if _, err := cache.InjectDevices(spec, devices...); err != nil {
			t.Fatalf("%s: CDI devices %q do not resolve: %v", tc.name, devices, err)
		}
		var paths []string
		for _, dev := range spec.Linux.Devices {
			paths = append(paths, dev.Path)
		}
		slices.Sort(paths)
		if !slices.Equal(paths, tc.want) {
			t.Errorf("%s: container device files %q, want %q", tc.name, paths, tc.want)
		}
	}
}
