package lab

import (
	"bytes"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/lab/status"
)

// TestGPUHealthOf: a node's whole GPUs counted healthy, failed (with their
// Xids) or unknown from the taints of its pool's newest generation; MIG
// devices, older generations, other drivers and pools that name no node
// are left out.
func TestGPUHealthOf(t *testing.T) {
	whole := func(name string, taints ...resourceapi.DeviceTaint) resourceapi.Device {
		return resourceapi.Device{Name: name, Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{gpu.AttrUUID: {StringValue: ptr.To("GPU-" + name)}}, Taints: taints}
	}
	mig := resourceapi.Device{Name: "gpu-0-mig-1g.10gb-0", Taints: []resourceapi.DeviceTaint{{Key: gpu.TaintKeyXID, Value: "79", Effect: resourceapi.DeviceTaintEffectNoExecute}}}
	xid := func(v string) resourceapi.DeviceTaint {
		return resourceapi.DeviceTaint{Key: gpu.TaintKeyXID, Value: v, Effect: resourceapi.DeviceTaintEffectNoExecute}
	}
	unwatched := resourceapi.DeviceTaint{Key: gpu.TaintKeyUnwatched, Effect: resourceapi.DeviceTaintEffectNone}
	slice := func(driver, node string, gen int64, devs ...resourceapi.Device) resourceapi.ResourceSlice {
		s := resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Driver: driver, Pool: resourceapi.ResourcePool{Name: node, Generation: gen}, Devices: devs}}
		if node != "" {
			s.Spec.NodeName = ptr.To(node)
		} else {
			s.Spec.AllNodes = ptr.To(true)
		}
		return s
	}
	got := gpuHealthOf([]resourceapi.ResourceSlice{
		// Generation 1 had gpu-1 failed; generation 2, in two slices,
		// has it healed and gpu-0 failed with 79, gpu-2 with 48.
		slice(gpu.DriverName, "a", 1, whole("gpu-0"), whole("gpu-1", xid("79"))),
		slice(gpu.DriverName, "a", 2, whole("gpu-0", xid("79")), whole("gpu-1"), mig),
		slice(gpu.DriverName, "a", 2, whole("gpu-2", xid("48")), whole("gpu-3"), whole("gpu-4", unwatched)),
		slice(gpu.DriverName, "b", 1, whole("gpu-0"), whole("gpu-1")),
		slice(gpu.DriverName, "c", 1, mig),
		slice("nic.dralab.dev", "d", 1, whole("nic-0", xid("79"))),
		slice(gpu.DriverName, "", 1, whole("fabric-0", xid("79"))),
	})
	want := map[string]string{
		"a": "2 healthy, 2 failed (Xid 48, 79), 1 unknown (Xids not watched)",
		"b": "2 healthy",
	}
	if len(got) != len(want) {
		t.Errorf("health of nodes %v, want of %v", got, want)
	}
	for node, w := range want {
		if got[node] != w {
			t.Errorf("node %s: %q, want %q", node, got[node], w)
		}
	}

	// lab:status shows it in its own column, "-" where there is none.
	st := status.Status{Nodes: []status.NodeStatus{
		{Name: "a", Ready: "True", Process: "running", Profile: "4× H100", GPUHealth: got["a"], Driver: "running"},
		{Name: "cpu", Ready: "True", Process: "running"},
	}}
	var out bytes.Buffer
	if err := st.WriteNodes(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "HEALTH") || !strings.Contains(lines[1], want["a"]) || strings.Count(lines[2], " - ") < 2 {
		t.Errorf("lab:status's table:\n%s", out.String())
	}
}
