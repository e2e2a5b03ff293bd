package devicecheck

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// The device check's whole path, with a mock NVML standing in for a GPU:
// what `go run mage.go device:check` does on a GPU machine.
func TestDeviceCheckWithMockNVML(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded lab: run without -short")
	}
	var out bytes.Buffer
	if err := Run(context.Background(), Options{NVML: "mock:dgxh100", Out: &out}); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	for _, want := range []string{
		"NVML (mock:dgxh100) reports 8 GPU(s)",
		"--- ResourceSlice ",
		"nodeName: gpu-node",
		"string: NVIDIA H100 80GB HBM3",
		"allocated gpu-node/gpu-0 (NVIDIA H100 80GB HBM3) and prepared",
		"NVIDIA_VISIBLE_DEVICES=GPU-",
		"GPU_DEVICE_0=gpu-0",
		// The counting node: its device plugin's answer to Allocate names
		// the GPU's UUID; a mock's GPUs have no device files.
		"Pod gpu-count counted a GPU on node gpu-node-counted; for gpu-0 its device plugin gives device files [] and NVIDIA_VISIBLE_DEVICES=GPU-",
		"Device check passed",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// Without a GPU, the check says so in one line, before starting a lab.
func TestDeviceCheckWithoutNVML(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver: run without -short")
	}
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver")
	}
	var out bytes.Buffer
	err := Run(context.Background(), Options{NVML: "host", Out: &out})
	if err == nil || err.Error() != "device check: NVML library not found: is the NVIDIA driver installed?" {
		t.Errorf("Run = %v, want the library-not-found error", err)
	}
	if out.Len() != 0 {
		t.Errorf("printed %q before failing", out.String())
	}
}

// What the device check accepts of a device plugin's answer for a counted
// GPU: its UUID in NVIDIA_VISIBLE_DEVICES; no device files for a mock's
// GPU; a real one's own and the control files, each a character device of
// this host (here /dev/null stands in for them).
func TestCheckAllocation(t *testing.T) {
	uuids := map[string]string{"gpu-0": "GPU-0", "gpu-1": "GPU-1"}
	env := map[string]string{"NVIDIA_VISIBLE_DEVICES": "GPU-0"}
	spec := func(path, host string) *pluginapi.DeviceSpec {
		return &pluginapi.DeviceSpec{ContainerPath: path, HostPath: host, Permissions: "rw"}
	}
	regular := filepath.Join(t.TempDir(), "nvidia0")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	devs := []*pluginapi.DeviceSpec{spec("/dev/nvidia0", "/dev/null"), spec("/dev/nvidiactl", "/dev/null"), spec("/dev/nvidia-uvm", "/dev/null")}
	for _, c := range []struct {
		name string
		id   string
		resp *pluginapi.ContainerAllocateResponse
		mock bool
		want string // "" for none
	}{
		{"mock", "gpu-0", &pluginapi.ContainerAllocateResponse{Envs: env}, true, ""},
		{"mock with device files", "gpu-0", &pluginapi.ContainerAllocateResponse{Envs: env, Devices: devs}, true, "gave a mock's GPU device files"},
		{"another GPU's UUID", "gpu-1", &pluginapi.ContainerAllocateResponse{Envs: env}, true, `want its UUID "GPU-1"`},
		{"real", "gpu-0", &pluginapi.ContainerAllocateResponse{Envs: env, Devices: devs}, false, ""},
		{"real without files", "gpu-0", &pluginapi.ContainerAllocateResponse{Envs: env}, false, "want its own /dev/nvidiaN"},
		{"real without control files", "gpu-0", &pluginapi.ContainerAllocateResponse{Envs: env, Devices: devs[:1]}, false, "want its own /dev/nvidiaN"},
		{"real from a regular file", "gpu-0", &pluginapi.ContainerAllocateResponse{Envs: env, Devices: []*pluginapi.DeviceSpec{spec("/dev/nvidia0", regular), devs[1]}}, false, "not a character device"},
	} {
		err := checkAllocation(c.id, c.resp, uuids, c.mock)
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
