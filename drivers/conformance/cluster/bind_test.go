package cluster

import (
	"context"
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// Three doubles of a wrong driver, each failing the suite with a message
// that names the pod, its claim, the device it was allocated and what it
// proved: one that injects another device than the allocated one, one
// that injects the same device into every container, and one that gives a
// MIG-like slice other than the one allocated.
func TestProofsBindToTheAllocation(t *testing.T) {
	ctx := context.Background()

	t.Run("the wrong device", func(t *testing.T) {
		f, k := newFakeClusterOf(t, refuseWithEvent, fakeDevices(2, false))
		k.m.Proof.Names = "{device}"
		f.mu.Lock()
		f.inject = func(d string) string {
			if d == "gpu-0" {
				return "gpu-1"
			}
			return "gpu-0"
		}
		f.mu.Unlock()
		_, _, _, err := k.oneDevice(ctx, "one", nil)
		for _, want := range []string{"pod one proves \"gpu-1\"", `"gpu-0" for gpu.example.com/node-a/gpu-0 (claim one)`, "names: {device}"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want it to say %s", err, want)
			}
		}
		if err := k.cleanup(ctx); err != nil {
			t.Error(err)
		}
	})

	t.Run("the same device everywhere", func(t *testing.T) {
		devices, set := partitionedGPU()
		f, k := newFakeClusterOf(t, refuseWithEvent, devices, set)
		withPartitions(k, `device.attributes["gpu.example.com"].size == 1`)
		// Without names: the pattern alone, which every value matches.
		k.m.Partitions.Proof.Names = ""
		f.mu.Lock()
		f.inject = func(string) string { return "gpu-0-small-0" }
		f.mu.Unlock()
		err := k.partitions(ctx, t.Logf, k)
		for _, want := range []string{"pods part-0 and part-1 prove the same value \"gpu-0-small-0\"", "gpu.example.com/node-a/gpu-0-small-0 (claim part-0)", "gpu.example.com/node-a/gpu-0-small-1 (claim part-1)", "does not tell devices apart"} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want it to say %s", err, want)
			}
		}
		if err := k.cleanup(ctx); err != nil {
			t.Error(err)
		}
	})

	t.Run("another slice than the allocated one", func(t *testing.T) {
		devices, set := partitionedGPU()
		f, k := newFakeClusterOf(t, refuseWithEvent, devices, set)
		withPartitions(k, `device.attributes["gpu.example.com"].size == 1`)
		f.mu.Lock()
		f.inject = func(d string) string { return strings.Replace(d, "small-0", "small-3", 1) }
		f.mu.Unlock()
		err := k.partitions(ctx, t.Logf, k)
		for _, want := range []string{`pod part-0 proves "gpu-0-small-3"`, `"gpu-0-small-0" for gpu.example.com/node-a/gpu-0-small-0 (claim part-0)`} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("got %v, want it to say %s", err, want)
			}
		}
		if err := k.cleanup(ctx); err != nil {
			t.Error(err)
		}
	})

	t.Run("a faithful driver", func(t *testing.T) {
		_, k := newFakeClusterOf(t, refuseWithEvent, fakeDevices(2, true))
		k.m.Proof.Names = "{device}"
		for _, name := range []string{"one", "two"} {
			if _, _, _, err := k.oneDevice(ctx, name, nil); err != nil {
				t.Errorf("pod %s, its device named: %v", name, err)
			}
		}
		if len(k.proven) != 2 || k.proven[0].value == k.proven[1].value {
			t.Errorf("proven %+v, want two devices, two values", k.proven)
		}
		if err := k.cleanup(ctx); err != nil {
			t.Error(err)
		}
	})
}

// A template names the device, its pool and driver, or an attribute; an
// attribute the device lacks is an error, a placeholder the suite does not
// know is refused when the manifest is read.
func TestProofNames(t *testing.T) {
	dev := fakeDevices(4, true)[3]
	for names, want := range map[string]string{
		"{device}":                          "gpu-3",
		"{driver}/{pool}/{device}":          "gpu.example.com/node-a/gpu-3",
		"{attribute:uuid}":                  "GPU-0003",
		"{attribute:gpu.example.com/index}": "3",
	} {
		got, err := manifest.Proof{Names: names}.Expected(fakeDriver, fakeNode, dev)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", names, got, err, want)
		}
	}
	if _, err := (manifest.Proof{Names: "{attribute:serial}"}).Expected(fakeDriver, fakeNode, dev); err == nil || !strings.Contains(err.Error(), "has no attribute serial") {
		t.Errorf("a missing attribute: %v", err)
	}
}
