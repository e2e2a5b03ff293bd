package cluster

import (
	"context"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// A class may select on allowMultipleAllocations, as the API server's
// environment lets it: the suite's selection gives CEL the field, so a
// class of shareable devices has its devices here as in the allocator.
func TestSelectedByReadsAllowMultipleAllocations(t *testing.T) {
	selectors, err := devices.CompileSelectors(`device.allowMultipleAllocations`)
	if err != nil {
		t.Fatal(err)
	}
	devs := []device{
		{driver: "gpu.example.com", pool: "p", dev: resourceapi.Device{Name: "shared", AllowMultipleAllocations: ptr.To(true)}},
		{driver: "gpu.example.com", pool: "p", dev: resourceapi.Device{Name: "whole"}},
	}
	got, err := selectedBy(context.Background(), selectors, devs)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].dev.Name != "shared" {
		t.Errorf("selected %v, want the shared device alone", got)
	}
}
