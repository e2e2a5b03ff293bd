//go:build cgo

package nvmllib

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	dnvml "github.com/dralab/dralab/drivers/nvml"
)

// BenchmarkEnumeratePublish is what a driver does at start on a DGX H100:
// list the GPUs through NVML (the mock), build the devices and the
// node's single-pool DriverResources.
func BenchmarkEnumeratePublish(b *testing.B) {
	l, err := Open("mock:dgxh100", WithNode(node))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	inv := &dnvml.Inventory{Lister: l, SysfsRoot: b.TempDir()}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		devs, err := inv.Devices(ctx)
		if err != nil {
			b.Fatal(err)
		}
		api := make([]resourceapi.Device, 0, len(devs))
		for _, d := range devs {
			api = append(api, d.API)
		}
		res := resourceslice.DriverResources{
			Pools: map[string]resourceslice.Pool{node: {Slices: []resourceslice.Slice{{Devices: api}}}},
		}
		if n := len(res.Pools[node].Slices[0].Devices); n != 8 {
			b.Fatalf("published %d devices, want 8", n)
		}
	}
}
