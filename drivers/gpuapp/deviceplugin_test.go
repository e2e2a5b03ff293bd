package gpuapp

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/kit/kittest"
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
