package kit

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dralab/dralab/drivers/kit/kittest"
)

// startDevicePlugin starts a device plugin of inv, with a fake kubelet it
// registers with, and returns it and a client of its socket.
func startDevicePlugin(t *testing.T, ctx context.Context, inv Inventory) (*DevicePlugin, pluginapi.DevicePluginClient) {
	t.Helper()
	dir, err := os.MkdirTemp("", "dp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	p, err := StartDevicePlugin(ctx, DevicePluginOptions{ResourceName: "test.dev/gpu", Dir: dir, Socket: "test.sock", EnvPrefix: "GPU_DEVICE", Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	if err := p.Ready(ctx); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("Ready with no kubelet = %v, want not registered", err)
	}

	// The kubelet comes up after the plugin, as in a lab, which starts a
	// node's driver with its kubelet: the kubelet's device manager removes
	// the plugin's socket, and the plugin serves on a new one.
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
	t.Cleanup(func() { conn.Close() })
	return p, pluginapi.NewDevicePluginClient(conn)
}

// A kubelet restart removes the plugin's socket and makes a new
// kubelet.sock: the plugin registers again, and the new kubelet reaches it
// (the fake device manager dials the endpoint as the kubelet does). Before,
// the plugin registered with a socket that no longer existed, for ever,
// and the node counted none of its GPUs: the project CI's
// TestFeaturesOnLab failure ("node count-l4 has 0 of its 2 GPUs
// allocatable").
func TestDevicePluginOutlivesKubeletRestarts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p, _ := startDevicePlugin(t, ctx, testDevices(2))
	dir := p.opts.Dir
	for restart := 1; restart <= 2; restart++ {
		registered := kittest.DeviceManager(t, dir)
		select {
		case req := <-registered:
			if req.Endpoint != "test.sock" {
				t.Errorf("restart %d: registered %+v", restart, req)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("restart %d: the plugin never registered with the restarted kubelet", restart)
		}
		for deadline := time.Now().Add(10 * time.Second); p.Ready(ctx) != nil; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("restart %d: registered, but Ready = %v after 10s", restart, p.Ready(ctx))
			}
		}
	}
	p.Stop()
	if _, err := os.Stat(filepath.Join(dir, "test.sock")); !os.IsNotExist(err) {
		t.Errorf("after Stop, the plugin's socket: %v, want it removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kubelet.sock")); err != nil {
		t.Errorf("after Stop, the kubelet's socket: %v, want it kept", err)
	}
}

func TestDevicePluginCounts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, client := startDevicePlugin(t, ctx, testDevices(3))
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

// Counting mode gives a container what a claim gives it: its devices'
// files (from the host's path) and the node's control files once, the
// variables set once for all its devices (NVIDIA_VISIBLE_DEVICES on an
// NVML node); and it reports a failed device Unhealthy at once, which the
// kubelet counts out. Before, Allocate gave variables only and every
// device was Healthy for ever.
func TestDevicePluginGivesDevicesAndHealth(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	devs := testDevices(3)
	for i := range devs {
		devs[i].DeviceNodes = []DeviceNode{{Path: fmt.Sprintf("/dev/nvidia%d", i), HostPath: fmt.Sprintf("/run/nvidia/driver/dev/nvidia%d", i)}}
	}
	inv := nodeWide{devs, ContainerEdits{Env: map[string]string{nodeEnv: "n"}, DeviceNodes: []DeviceNode{{Path: "/dev/nvidiactl"}}}}
	p, client := startDevicePlugin(t, ctx, inv)
	resp, err := client.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"gpu-0", "gpu-2"}}, {}}})
	if err != nil {
		t.Fatal(err)
	}
	c := resp.ContainerResponses[0]
	var specs []string
	for _, d := range c.Devices {
		specs = append(specs, d.HostPath+"->"+d.ContainerPath+":"+d.Permissions)
	}
	if want := []string{"/run/nvidia/driver/dev/nvidia0->/dev/nvidia0:rw", "/run/nvidia/driver/dev/nvidia2->/dev/nvidia2:rw", "/dev/nvidiactl->/dev/nvidiactl:rw"}; !slices.Equal(specs, want) {
		t.Errorf("Allocate devices %v, want %v", specs, want)
	}
	if c.Envs["VISIBLE_DEVICES"] != "uuid-gpu-0,uuid-gpu-2" || c.Envs[nodeEnv] != "n" || c.Envs["GPU_DEVICE_1"] != "gpu-2" {
		t.Errorf("Allocate env %v, want VISIBLE_DEVICES=uuid-gpu-0,uuid-gpu-2, %s=n and GPU_DEVICE_1=gpu-2", c.Envs, nodeEnv)
	}
	if empty := resp.ContainerResponses[1]; len(empty.Devices) > 0 || len(empty.Envs) > 0 {
		t.Errorf("a container without devices gets %+v", empty)
	}

	stream, err := client.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	health := func() string {
		t.Helper()
		list, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, d := range list.Devices {
			out = append(out, d.ID+"="+d.Health)
		}
		return strings.Join(out, ",")
	}
	if got := health(); got != "gpu-0=Healthy,gpu-1=Healthy,gpu-2=Healthy" {
		t.Fatalf("first list %s", got)
	}
	if err := p.SetDeviceHealth(ctx, map[string]DeviceFault{"gpu-1": {Message: "XID 79: GPU has fallen off the bus"}}); err != nil {
		t.Fatal(err)
	}
	if got := health(); got != "gpu-0=Healthy,gpu-1=Unhealthy,gpu-2=Healthy" {
		t.Errorf("after gpu-1 failed: %s", got)
	}
	if err := p.SetDeviceHealth(ctx, map[string]DeviceFault{"gpu-7": {}}); err == nil || !strings.Contains(err.Error(), `"gpu-7" is not a device of this node`) {
		t.Errorf("SetDeviceHealth of an unknown device = %v", err)
	}
	if err := p.SetDeviceHealth(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := health(); got != "gpu-0=Healthy,gpu-1=Healthy,gpu-2=Healthy" {
		t.Errorf("after healing: %s", got)
	}
}

// TestSameSocket: a socket made again at its path is another socket, even
// where the file system gives it the inode number the removed one had (a
// kubelet restarted: the plugin registers again); the same socket looked at
// twice is the same.
func TestSameSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubelet.sock")
	listen := func() (net.Listener, os.FileInfo) {
		t.Helper()
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		info, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return l, info
	}
	l, first := listen()
	again, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !sameSocket(first, again) {
		t.Error("one socket looked at twice is not the same")
	}
	l.Close()
	os.Remove(path)
	time.Sleep(10 * time.Millisecond) // a clock tick apart, as two kubelet starts are
	l2, second := listen()
	defer l2.Close()
	if sameSocket(first, second) {
		t.Errorf("a socket made again is the same (inode reused: %v)", os.SameFile(first, second))
	}
}
