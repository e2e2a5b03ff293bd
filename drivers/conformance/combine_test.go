package conformance

import (
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/results"
)

// Checked together, each driver's features are named after it; one that
// a driver's manifest does not enable is left out for that driver, and is
// skipped only when no manifest of the run enables it. Alone, a driver's
// report is as before: every feature, skips included, unprefixed.
func TestCombineSkipsOnlyWhatNoManifestEnables(t *testing.T) {
	gpu := &manifest.Manifest{Driver: "gpu.example.com", Capabilities: map[manifest.Capability]bool{manifest.DRAPartitionableDevices: true}}
	nic := &manifest.Manifest{Driver: "nic.example.com", Capabilities: map[manifest.Capability]bool{manifest.NetworkData: true}}
	run := func(m *manifest.Manifest) []cluster.Result {
		var out []cluster.Result
		for _, f := range []struct{ name, capability string }{
			{"single device", cluster.CoreCapability},
			{"partitionable devices", string(manifest.DRAPartitionableDevices)},
			{"network data", string(manifest.NetworkData)},
			{"opaque config", string(manifest.OpaqueConfig)},
		} {
			r := cluster.Result{Feature: f.name, Capability: f.capability, Status: results.Passed}
			if f.capability != cluster.CoreCapability && !m.Enabled(manifest.Capability(f.capability)) {
				r.Status = results.Skipped
			}
			out = append(out, r)
		}
		return out
	}
	names := func(cases []results.Case) string {
		var out []string
		for _, c := range cases {
			out = append(out, c.Name+"="+string(c.Status))
		}
		return strings.Join(out, " ")
	}
	together := names(combine([]*manifest.Manifest{gpu, nic}, [][]cluster.Result{run(gpu), run(nic)}))
	want := "cluster/gpu.example.com/single device=PASS cluster/nic.example.com/single device=PASS " +
		"cluster/gpu.example.com/partitionable devices=PASS cluster/nic.example.com/network data=PASS cluster/opaque config=SKIP"
	if together != want {
		t.Errorf("together:\n got %s\nwant %s", together, want)
	}
	alone := names(combine([]*manifest.Manifest{nic}, [][]cluster.Result{run(nic)}))
	if want := "cluster/single device=PASS cluster/partitionable devices=SKIP cluster/network data=PASS cluster/opaque config=SKIP"; alone != want {
		t.Errorf("alone:\n got %s\nwant %s", alone, want)
	}
}
