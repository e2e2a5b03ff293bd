package kit

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dralab/dralab/drivers/kit/kittest"
)

func TestDevicePluginCounts(t *testing.T) {
	dir, err := os.MkdirTemp("", "dp-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, err := StartDevicePlugin(ctx, DevicePluginOptions{ResourceName: "test.dev/gpu", Dir: dir, Socket: "test.sock", EnvPrefix: "GPU_DEVICE", Inventory: testDevices(3)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	if err := p.Ready(ctx); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("Ready with no kubelet = %v, want not registered", err)
	}

	// The kubelet comes up after the plugin, as after a kubelet restart.
	registered := kittest.DeviceManager(t, dir)

	var req *pluginapi.RegisterRequest
	select {
	case req = <-registered:
	case <-time.After(10 * time.Second):
		t.Fatal("the plugin never registered")
	}
	// Ready once the kubelet's answer reached the plugin.
	for deadline := time.Now().Add(10 * time.Second); p.Ready(ctx) != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("registered, but Ready = %v after 10s", p.Ready(ctx))
		}
	}
	if req.ResourceName != "test.dev/gpu" || req.Endpoint != "test.sock" || req.Version != pluginapi.Version {
		t.Errorf("register request = %+v", req)
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, req.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := pluginapi.NewDevicePluginClient(conn)
	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Devices) != 3 || list.Devices[0].ID != "gpu-0" || list.Devices[2].Health != pluginapi.Healthy {
		t.Errorf("ListAndWatch = %v", list.Devices)
	}
	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"gpu-2"}}}})
	if err != nil {
		t.Fatal(err)
	}
	env := resp.ContainerResponses[0].Envs
	if env["GPU_DEVICE_0"] != "gpu-2" || env["GPU_DEVICE_0_UUID"] != "uuid-gpu-2" {
		t.Errorf("Allocate env = %v", env)
	}
	if _, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"gpu-9"}}}}); err == nil {
		t.Error("Allocate of an unknown device succeeded")
	}
}
