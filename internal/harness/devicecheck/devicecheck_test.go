package devicecheck

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
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
