package gpuapp

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/nvml"
)

// A GPU that reports an application Xid (68 and 109 among them) or one the
// node ignores (--ignored-xids) stays healthy, whether the Xid comes from
// NVML's events or from the faults file; any other critical Xid fails it.
func TestIgnoredXIDsKeepTheGPUHealthy(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "gpuapp-xid-") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	o := Options{Inventory: InventoryFake, Mode: ModeDRA, Profile: "h100-80gb", GPUs: 2, NodeFlags: kit.NodeFlags{NodeName: "n"},
		IgnoredXIDs: []int{92}}
	inv, err := fakeInventory(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "registry"), 0o750); err != nil {
		t.Fatal(err)
	}
	d, err := kit.Start(ctx, kit.Options{
		DriverName: gpu.DriverName, NodeName: "n",
		KubeClient:   fake.NewClientset(&v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "n-uid"}}),
		RegistrarDir: filepath.Join(dir, "registry"), PluginDir: filepath.Join(dir, "plugin"),
		CDIDir: filepath.Join(dir, "cdi"), CheckpointPath: filepath.Join(dir, "checkpoint.json"),
		CDIKind: "k8s.gpu.dralab.dev/gpu", EnvPrefix: "GPU_DEVICE", Inventory: inv,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	devs, err := inv.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	uuid := *devs[0].API.Attributes[gpu.AttrUUID].StringValue
	h := &gpuHealth{driver: d, devs: devs, gpus: map[string]gpu.GPUFault{}, ignored: o.IgnoredXIDs}
	event := h.xid(ctx)
	failed := func() []string { return slices.Sorted(maps.Keys(d.DeviceFaults())) }

	for _, xid := range []int{13, 31, 43, 45, 68, 109, 92} {
		event(nvml.XIDEvent{UUID: uuid, XID: xid})
		if got := failed(); len(got) != 0 {
			t.Fatalf("after Xid %d (an application error, or ignored by the node), failed devices %v, want none", xid, got)
		}
	}
	if err := h.set(ctx, map[string]gpu.GPUFault{"gpu-1": {XID: 92}}); err != nil {
		t.Fatal(err)
	}
	if got := failed(); len(got) != 0 {
		t.Fatalf("after the faults file names gpu-1 with the ignored Xid 92, failed devices %v, want none", got)
	}
	event(nvml.XIDEvent{UUID: uuid, XID: 94})
	if got, want := failed(), []string{"gpu-0"}; !slices.Equal(got, want) {
		t.Fatalf("after Xid 94, which the node does not ignore, failed devices %v, want %v", got, want)
	}
}
