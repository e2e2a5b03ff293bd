package nvml

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/kit/kittest"
)

// Counting mode on an NVML node gives a container its GPUs for real: the
// GPUs' device files and the control files, from the driver root's
// directory, and NVIDIA_VISIBLE_DEVICES with their UUIDs, as a claim's CDI
// spec does. Before, Allocate set dralab's variables only: the container
// had no GPU.
func TestCountingModeGivesTheGPUs(t *testing.T) {
	dir, err := os.MkdirTemp("", "nvml-dp-") // short: a socket path
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := h100(0, 0, "00000000:1B:00.0"), h100(1, 1, "00000000:43:00.0")
	inv := &Inventory{Lister: fixed(a, b), DevRoot: "/run/nvidia/driver/dev"}
	registered := kittest.DeviceManager(t, dir)
	p, err := kit.StartDevicePlugin(ctx, kit.DevicePluginOptions{ResourceName: "dralab.dev/gpu", Dir: dir, Socket: "gpu.sock", EnvPrefix: "GPU_DEVICE", Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	select {
	case <-registered:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin never registered")
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "gpu.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pluginapi.NewDevicePluginClient(conn).Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{DeviceName(1)}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.ContainerResponses[0]
	var files []string
	for _, d := range c.Devices {
		files = append(files, d.HostPath+"->"+d.ContainerPath)
	}
	want := []string{"/run/nvidia/driver/dev/nvidia1->/dev/nvidia1", "/run/nvidia/driver/dev/nvidiactl->/dev/nvidiactl",
		"/run/nvidia/driver/dev/nvidia-uvm->/dev/nvidia-uvm", "/run/nvidia/driver/dev/nvidia-uvm-tools->/dev/nvidia-uvm-tools"}
	if !slices.Equal(files, want) {
		t.Errorf("device files %v, want %v", files, want)
	}
	if got := c.Envs[VisibleDevicesEnv]; got != b.UUID {
		t.Errorf("%s = %q, want %s", VisibleDevicesEnv, got, b.UUID)
	}
}
