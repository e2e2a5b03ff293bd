package labserver

import (
	"slices"
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/fakecpu"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// A hollow node's memory reaches its kubelet in bytes, and its CPU
// complexes' CPUs as its cpu; its labels are its own, its topology's and
// its devices' (nodedrivers.Labels).
func TestNodeArgs(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
	cfg := &config.Config{}
	args, err := nodeArgs(dir, cfg, config.Node{Name: "m", Memory: "64Gi"}, "ca.crt", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--memory=68719476736") {
		t.Errorf("node args %v lack --memory=68719476736", args)
	}
	args, err = nodeArgs(dir, cfg, config.Node{Name: "d"}, "ca.crt", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--memory=") }) {
		t.Errorf("a node without memory runs with %v", args)
	}
	n := config.Node{Name: "c", CPUs: &config.CPUs{Complexes: 4, CPUsPerComplex: 16},
		GPUs: &config.GPUs{Profile: "h100-80gb", Count: 2, Mode: config.GPUModeDRA}}
	node, err := nodeArgs(dir, cfg, n, "ca.crt", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--cpus=64", "--label=" + gpu.NodeProfileLabel + "=h100-80gb"} {
		if !slices.Contains(node, want) {
			t.Errorf("node args %v lack %s", node, want)
		}
	}
	if config.MaxCPUComplexes != fakecpu.MaxComplexes || config.MaxCPUsPerComplex != fakecpu.MaxCPUsPerComplex {
		t.Errorf("the configuration's limits %d, %d are not the CPU driver's %d, %d", config.MaxCPUComplexes, config.MaxCPUsPerComplex, fakecpu.MaxComplexes, fakecpu.MaxCPUsPerComplex)
	}
}
