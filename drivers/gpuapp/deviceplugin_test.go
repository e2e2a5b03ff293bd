package gpuapp

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/kit/kittest"
	"github.com/dralab/dralab/drivers/nvml"
)

// In device-plugin mode the driver needs no API: it registers with the
// kubelet while its kubeconfig's credentials do not exist yet, as in a
// lab, which starts it with its node, before the control plane. In DRA
// mode the same missing credentials are an error.
func TestDevicePluginStartsWithoutTheAPI(t *testing.T) {
	dir, err := os.MkdirTemp("", "gpuapp-dp-") // short: a socket path
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: lab, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: driver, user: {tokenFile: `+filepath.Join(dir, "token-not-issued-yet")+`}}]
contexts: [{name: lab, context: {cluster: lab, user: driver}}]
current-context: lab
`), 0o600); err != nil {
		t.Fatal(err)
	}
	registered := kittest.DeviceManager(t, dir)

	o := Options{Inventory: InventoryFake, Mode: ModeDevicePlugin, Profile: "h100-80gb", GPUs: 2, DevicePluginsDir: dir,
		NodeFlags: kit.NodeFlags{NodeName: "n", Kubeconfig: kubeconfig}}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, o) }()
	select {
	case req := <-registered:
		if req.ResourceName != gpu.ExtendedResource {
			t.Errorf("registered %q, want %q", req.ResourceName, gpu.ExtendedResource)
		}
	case err := <-ran:
		t.Fatalf("Run ended before it registered: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the driver never registered with the kubelet")
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run = %v after it was stopped", err)
	}

	o.Mode = ModeDRA
	if err := Run(context.Background(), o); err == nil || !strings.Contains(err.Error(), "token-not-issued-yet") {
		t.Errorf("in DRA mode without credentials, Run = %v, want an error naming the token file", err)
	}
}

// In counting mode an NVML node's failed GPU is reported Unhealthy from
// the same Xid watch as in DRA mode (here an Xid 79 injected into a mock
// through the faults file), so the kubelet counts it out. Before, counting
// mode ran no watch and every GPU was Healthy for ever.
func TestCountingModeReportsXIDs(t *testing.T) {
	dir, err := os.MkdirTemp("", "gpuapp-dpx-") // short: a socket path
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	registered := kittest.DeviceManager(t, dir)
	faults := filepath.Join(dir, "gpu-faults.json")
	o := Options{Inventory: InventoryNVML, NVML: nvml.MockPrefix + "dgxh100", Mode: ModeDevicePlugin, DevicePluginsDir: dir, FaultsFile: faults,
		NodeFlags: kit.NodeFlags{NodeName: "n"}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- Run(ctx, o) }()
	select {
	case <-registered:
	case err := <-ran:
		t.Fatalf("Run ended before it registered: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("the driver never registered with the kubelet")
	}
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "dralab-gpu.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := pluginapi.NewDevicePluginClient(conn).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	unhealthy := func(list *pluginapi.ListAndWatchResponse) []string {
		var out []string
		for _, d := range list.Devices {
			if d.Health != pluginapi.Healthy {
				out = append(out, d.ID)
			}
		}
		return out
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Devices) != 8 || len(unhealthy(first)) > 0 {
		t.Fatalf("first list: %d devices, unhealthy %v; want 8 healthy", len(first.Devices), unhealthy(first))
	}
	if err := gpu.WriteFaults(faults, map[string]gpu.GPUFault{"gpu-3": {XID: 79}}); err != nil {
		t.Fatal(err)
	}
	got := make(chan []string, 1)
	go func() {
		for {
			list, err := stream.Recv()
			if err != nil {
				return
			}
			if u := unhealthy(list); len(u) > 0 {
				got <- u
				return
			}
		}
	}()
	select {
	case u := <-got:
		if !slices.Equal(u, []string{"gpu-3"}) {
			t.Errorf("unhealthy %v, want gpu-3", u)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("gpu-3's Xid 79 never made it Unhealthy")
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run = %v after it was stopped", err)
	}
}
