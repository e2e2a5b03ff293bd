package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// The network-data check passes only when the claim's network data names
// the interface the container sees, with addresses and a hardware
// address that parse: a driver that writes one interface into the claim
// and gives the container another fails it, and so does one whose data
// holds an address without its prefix length, or none at all.
func TestNetworkDataMustBeWhatTheContainerSees(t *testing.T) {
	for _, c := range []struct {
		name string
		seen string
		data *resourceapi.NetworkDeviceData
		want string
	}{
		{"agrees", "eth1", &resourceapi.NetworkDeviceData{InterfaceName: "eth1", IPs: []string{"10.100.0.7/16"}, HardwareAddress: "02:11:22:33:44:55"}, ""},
		{"another interface", "eth7", &resourceapi.NetworkDeviceData{InterfaceName: "eth1"}, `sees interface "eth7", but the claim's network data for node-a/gpu-0 names "eth1"`},
		{"an address without its prefix", "eth1", &resourceapi.NetworkDeviceData{InterfaceName: "eth1", IPs: []string{"10.100.0.7"}}, `has address "10.100.0.7", not an address with its prefix length`},
		{"a bad hardware address", "eth1", &resourceapi.NetworkDeviceData{InterfaceName: "eth1", HardwareAddress: "02:11"}, `hardware address "02:11"`},
		{"no network data", "eth1", nil, "the device's entry has no networkData"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, k := newFakeCluster(t, refuseWithEvent)
			k.m.Timeouts.PodRunning = 2 * time.Second
			k.m.NetworkData = &manifest.NetworkDataProof{Interface: manifest.Proof{Env: &manifest.EnvProof{Name: "IFACE", Pattern: "^eth[0-9]+$"}}}
			f.setLog(func(int) string { return "GPU_DEVICE_0=" + f.podDevice(k.ns, "net") + "\nIFACE=" + c.seen + "\n" })
			// The driver: once the claim is allocated, its status entry.
			go func() {
				ctx := context.Background()
				_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
					claim, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, "net", metav1.GetOptions{})
					if err != nil || claim.Status.Allocation == nil {
						return false, nil
					}
					r := claim.Status.Allocation.Devices.Results[0]
					claim.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: r.Driver, Pool: r.Pool, Device: r.Device, NetworkData: c.data}}
					_, err = k.client.ResourceV1().ResourceClaims(k.ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{})
					return err == nil, nil
				})
			}()
			err := k.networkData(context.Background(), t.Logf, k)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("got %v, want a pass", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// The optional-node-operations check passes only when the node's pool
// skips prepare, the allocation carries the skip and the container, never
// prepared, proves nothing: a scheduler that does not copy the skip fails
// it, and so does a container that proves its device.
func TestOptionalNodeOperationsNeedTheSkipAndNoProof(t *testing.T) {
	for _, c := range []struct {
		name   string
		pool   bool // the slice skips node operations
		copied bool // the scheduler copies it
		proves bool // the container shows the device
		want   string
	}{
		{"skipped", true, true, false, ""},
		{"no pool skips", false, false, false, "no node publishes devices of class gpu.example.com only in pools with spec.skipNodeOperations"},
		{"not copied", true, false, false, "but its allocation says skipNodeOperations []: the scheduler did not copy the slice's"},
		{"prepared anyway", true, true, true, `pod quiet proves "gpu-0": its container was given the device, so the driver prepared it`},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, k := newFakeCluster(t, refuseWithEvent)
			k.m.Timeouts.PodRunning = 2 * time.Second
			ctx := context.Background()
			if c.pool {
				slice, err := k.client.ResourceV1().ResourceSlices().Get(ctx, fakeNode+"-gpus", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				slice.Spec.SkipNodeOperations = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}
				if _, err := k.client.ResourceV1().ResourceSlices().Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if c.copied {
				f.mu.Lock()
				f.skip = []resourceapi.SkipNodeOperation{resourceapi.SkipNodeOperationAll}
				f.mu.Unlock()
			}
			f.setLog(func(int) string {
				if c.proves {
					return "PATH=/bin\nGPU_DEVICE_0=" + f.podDevice(k.ns, "quiet") + "\n"
				}
				return "PATH=/bin\n"
			})
			err := k.optionalNodeOperations(ctx, t.Logf, k)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("got %v, want a pass", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}
