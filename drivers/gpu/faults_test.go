package gpu

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/kit"
)

func TestFaultsFileRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu-faults.json")
	if got, err := ReadFaults(path); err != nil || len(got) != 0 {
		t.Fatalf("missing file: %v, %v; want no faults", got, err)
	}
	if err := WriteFaults(path, map[string]GPUFault{"gpu-1": {XID: 48}}); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFaults(path)
	if err != nil || got["gpu-1"].XID != 48 || len(got) != 1 {
		t.Fatalf("read back %v, %v", got, err)
	}
	if err := WriteFaults(path, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("no fault left the file: %v", err)
	}
}

func TestFaultsFileIsStrict(t *testing.T) {
	dir := t.TempDir()
	for name, tc := range map[string]struct{ data, want string }{
		"unknown field": {`{"apiVersion":"gpu.dralab.dev/v1alpha1","kind":"GPUFaults","gpus":{"gpu-0":{"xid":79,"severity":"high"}}}`, `unknown field "gpus.gpu-0.severity"`},
		"bad xid":       {`{"apiVersion":"gpu.dralab.dev/v1alpha1","kind":"GPUFaults","gpus":{"gpu-0":{"xid":0}}}`, "gpus[gpu-0].xid: Invalid value: 0"},
		"wrong kind":    {`{"apiVersion":"gpu.dralab.dev/v1alpha1","kind":"Faults","gpus":{}}`, `kind "Faults"`},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
		if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := ReadFaults(path)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want an error naming %s and %q", name, err, path, tc.want)
		}
	}
}

func TestXIDFaults(t *testing.T) {
	for xid, want := range map[int]string{
		79: "XID 79: GPU has fallen off the bus gpu.dralab.dev/xid=79:NoExecute",
		48: "XID 48: double-bit ECC error gpu.dralab.dev/xid=48:NoSchedule",
		7:  "XID 7: unknown Xid gpu.dralab.dev/xid=7:NoExecute",
	} {
		f, ok := LookupXID(xid).Fault()
		if !ok {
			t.Errorf("XID %d is no fault", xid)
			continue
		}
		if got := f.Message + " " + f.Taint.Key + "=" + f.Taint.Value + ":" + string(f.Taint.Effect); got != want {
			t.Errorf("XID %d: %q, want %q", xid, got, want)
		}
	}
	// The application errors NVIDIA's own drivers skip: 68 and 109 were
	// unknown, hence fatal, and evicted pods.
	for _, xid := range []int{13, 31, 43, 45, 68, 109} {
		if _, ok := LookupXID(xid).Fault(); ok {
			t.Errorf("XID %d, an application's error, fails the GPU", xid)
		}
	}
}

// A failed GPU's fault is its MIG devices' too; other GPUs stay healthy.
func TestDeviceFaultsReachMIGDevices(t *testing.T) {
	attr := func(k, v string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
		return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{resourceapi.QualifiedName(k): {StringValue: ptr.To(v)}}
	}
	dev := func(name string, attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute) kit.Device {
		return kit.Device{API: resourceapi.Device{Name: name, Attributes: attrs}}
	}
	devs := []kit.Device{
		dev("gpu-0-mig-1g10gb-0", attr(AttrParentUUID, "GPU-a")), dev("gpu-0", attr(AttrUUID, "GPU-a")),
		dev("gpu-1-mig-1g10gb-0", attr(AttrParentUUID, "GPU-b")), dev("gpu-1", attr(AttrUUID, "GPU-b")),
	}
	got, err := DeviceFaults(devs, map[string]GPUFault{"gpu-0": {XID: 79}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["gpu-0"].Message == "" || got["gpu-0-mig-1g10gb-0"].Message == "" {
		t.Errorf("faults %v, want gpu-0 and its MIG device", got)
	}
	if _, err := DeviceFaults(devs, map[string]GPUFault{"gpu-9": {XID: 79}}); err == nil || !strings.Contains(err.Error(), "GPUs: gpu-0, gpu-1") {
		t.Errorf("an unknown GPU: %v", err)
	}
	// A GPU lost (Xid 79) is NoExecute: its pods go. One only suspect,
	// NVML having lost a GPU it did not name, is NoSchedule: its pods
	// stay, new claims keep off.
	for _, tc := range []struct {
		fault GPUFault
		want  resourceapi.DeviceTaintEffect
	}{{GPUFault{XID: 79}, resourceapi.DeviceTaintEffectNoExecute}, {GPUFault{XID: 79, Unattributed: true}, resourceapi.DeviceTaintEffectNoSchedule}} {
		got, err := DeviceFaults(devs, map[string]GPUFault{"gpu-1": tc.fault})
		if err != nil {
			t.Fatal(err)
		}
		if f := got["gpu-1"]; f.Taint == nil || f.Taint.Effect != tc.want || got["gpu-1-mig-1g10gb-0"].Taint.Effect != tc.want {
			t.Errorf("%+v: faults %+v, want the GPU and its MIG device tainted %s", tc.fault, got, tc.want)
		}
	}
}

// The watcher hands over every change; a file that does not decode keeps
// the last faults in force.
func TestWatchFaults(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gpu-faults.json")
	var mu sync.Mutex
	var seen []map[string]GPUFault
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go WatchFaults(ctx, path, 10*time.Millisecond, func(_ context.Context, g map[string]GPUFault) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, g)
		return nil
	})
	waitFor := func(n int) []map[string]GPUFault {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			mu.Lock()
			if len(seen) >= n {
				out := append([]map[string]GPUFault(nil), seen...)
				mu.Unlock()
				return out
			}
			mu.Unlock()
		}
		t.Fatalf("fewer than %d changes seen", n)
		return nil
	}
	if got := waitFor(1); len(got[0]) != 0 {
		t.Fatalf("first state %v, want no faults", got[0])
	}
	if err := WriteFaults(path, map[string]GPUFault{"gpu-0": {XID: 79}}); err != nil {
		t.Fatal(err)
	}
	if got := waitFor(2); got[1]["gpu-0"].XID != 79 {
		t.Fatalf("second state %v", got[1])
	}
	if err := os.WriteFile(path, []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := WriteFaults(path, nil); err != nil {
		t.Fatal(err)
	}
	got := waitFor(3)
	if len(got) != 3 || len(got[2]) != 0 {
		t.Errorf("states %v: want the bad file skipped and then no faults", got)
	}
}

func TestUpdateFaults(t *testing.T) {
	data, err := UpdateFaults("n:/f", nil, func(f map[string]GPUFault) { f["gpu-1"] = GPUFault{XID: 79} })
	if err != nil || !strings.Contains(string(data), `"gpu-1": {`) || !strings.Contains(string(data), `"kind": "GPUFaults"`) {
		t.Fatalf("first fault: %s, %v", data, err)
	}
	data, err = UpdateFaults("n:/f", data, func(f map[string]GPUFault) { delete(f, "gpu-1") })
	if err != nil || data != nil {
		t.Errorf("healing the last fault: %q, %v; want no file", data, err)
	}
	if _, err := UpdateFaults("n:/f", []byte("{bad"), func(map[string]GPUFault) {}); err == nil || !strings.Contains(err.Error(), "n:/f") {
		t.Errorf("a bad file: %v, want an error naming it", err)
	}
}
