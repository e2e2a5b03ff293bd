package gpuapp

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

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
// startFakeDriver starts the GPU driver of two fake H100s on node n, with
// a fake API server, ignoring the Xids given; the driver and its devices.
func startFakeDriver(t *testing.T, ignored []int) (context.Context, *kit.Driver, []kit.Device) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir, err := os.MkdirTemp("", "gpuapp-xid-") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	o := Options{Inventory: InventoryFake, Mode: ModeDRA, Profile: "h100-80gb", GPUs: 2, NodeFlags: kit.NodeFlags{NodeName: "n"},
		IgnoredXIDs: ignored}
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
	t.Cleanup(d.Stop)
	devs, err := inv.Devices(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ctx, d, devs
}

func TestIgnoredXIDsKeepTheGPUHealthy(t *testing.T) {
	ctx, d, devs := startFakeDriver(t, []int{92})
	o := Options{IgnoredXIDs: []int{92}}
	uuid := *devs[0].API.Attributes[gpu.AttrUUID].StringValue
	h := &gpuHealth{driver: d, devs: devs, gpus: map[string]gpu.GPUFault{}, ignored: o.IgnoredXIDs, unwatched: map[string]bool{}}
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

// watcherFunc is an Xid watch made of a function.
type watcherFunc func(context.Context, func(nvml.XIDEvent)) error

func (f watcherFunc) WatchXIDs(ctx context.Context, emit func(nvml.XIDEvent)) error {
	return f(ctx, emit)
}

// Health does not fail open. A GPU the watch says it cannot watch has an
// unknown health (Unknown to the kubelet, a taint of effect None in the
// slice) until it is watched again; a watch that keeps failing is started
// again with backoff, and from its third failure in a row every GPU's
// health is unknown, until a watch runs and says it watches them. Before,
// the first error ended the watch, and the GPUs stayed healthy.
func TestUnwatchedGPUsHealthIsUnknown(t *testing.T) {
	ctx, d, devs := startFakeDriver(t, nil)
	uuid := func(i int) string { return *devs[i].API.Attributes[gpu.AttrUUID].StringValue }
	h := &gpuHealth{driver: d, devs: devs, gpus: map[string]gpu.GPUFault{}, unwatched: map[string]bool{}}
	unknown := func() []string {
		var out []string
		for name, f := range d.DeviceFaults() {
			if !f.Unknown || f.Taint == nil || f.Taint.Effect != "None" || f.Taint.Key != gpu.TaintKeyUnwatched {
				t.Errorf("device %s: fault %+v, want health unknown with a taint of effect None", name, f)
			}
			out = append(out, name)
		}
		slices.Sort(out)
		return out
	}
	event := h.xid(ctx)
	event(nvml.XIDEvent{UUID: uuid(1), Unwatched: true})
	if got := unknown(); !slices.Equal(got, []string{"gpu-1"}) {
		t.Fatalf("gpu-1 unwatched: unknown %v, want [gpu-1]", got)
	}
	event(nvml.XIDEvent{UUID: uuid(1), Watched: true})
	if got := unknown(); len(got) != 0 {
		t.Fatalf("gpu-1 watched again: unknown %v, want none", got)
	}

	defer func(b time.Duration) { watchBackoff = b }(watchBackoff)
	watchBackoff = time.Millisecond
	var calls atomic.Int64
	recovered := make(chan struct{})
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	go h.watch(watchCtx, watcherFunc(func(ctx context.Context, emit func(nvml.XIDEvent)) error {
		switch n := calls.Add(1); {
		case n <= int64(watchUnknownAfter):
			return errors.New("EventSet.Wait: ERROR_UNKNOWN")
		case n == int64(watchUnknownAfter)+1:
			// What the failures left: every GPU's health unknown.
			if got := unknown(); !slices.Equal(got, []string{"gpu-0", "gpu-1"}) {
				t.Errorf("after %d failed watches: unknown %v, want every GPU", watchUnknownAfter, got)
			}
			for i := range devs {
				emit(nvml.XIDEvent{UUID: uuid(i), Watched: true})
			}
			close(recovered)
		}
		<-ctx.Done()
		return nil
	}))
	select {
	case <-recovered:
	case <-time.After(5 * time.Second):
		t.Fatalf("the watch was not started again: %d calls", calls.Load())
	}
	if got := unknown(); len(got) != 0 {
		t.Errorf("a watch that runs and watches every GPU: unknown %v, want none", got)
	}
}
