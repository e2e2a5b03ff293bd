package conformance

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dralab/dralab/lab/config"
)

// fabricManifest is the network-attached GPU driver's manifest.
const fabricManifest = "../../drivers/fabric/driver.yaml"

// TestFabricDriverConformance runs the installed dralab-conformance,
// cluster layer, on the network-attached GPU driver (fabric.dralab.dev) as
// a driver author runs it on an outside driver: its slices are never a
// node's (a rack's nodeSelector, allNodes, per-device node selection), and
// its composable enclosure's GPUs attach before the pod binds. It is the
// lab of lab/examples/racks.yaml without the attach failures it injects.
// Every capability the manifest enables is verified: the run passes.
func TestFabricDriverConformance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded lab and installs dralab-conformance: run without -short")
	}
	ctx := context.Background()
	cfg, err := config.Example("racks.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "t-fabric-conformance"
	for i := range cfg.Fabric {
		cfg.Fabric[i].AttachFails, cfg.Fabric[i].AttachHangs = nil, nil
	}
	l, tool, consent, commandEnv := toolLab(ctx, t, cfg)
	driverManifest, err := filepath.Abs(fabricManifest)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, tool, "--manifest", driverManifest, "--kubeconfig", l.Kubeconfig(), "--target", consent, "--cluster-only")
	cmd.Env = append(os.Environ(), commandEnv...)
	out, err := cmd.CombinedOutput()
	t.Logf("dralab-conformance --cluster-only of fabric.dralab.dev:\n%s", out)
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) {
		t.Fatalf("exit %d: the network-attached driver does not pass", exit.ExitCode())
	} else if err != nil {
		t.Fatal(err)
	}
	// The baseline's check and one of each capability enabled.
	for _, check := range []string{"cluster/single device", "cluster/shared claim", "cluster/device taints", "cluster/binding conditions"} {
		if !passed(string(out), check) {
			t.Errorf("%s did not pass", check)
		}
	}
}

// passed tells whether the report's table has check passed.
func passed(report, check string) bool {
	for line := range strings.Lines(report) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), check+" ")
		if f := strings.Fields(rest); ok && len(f) > 0 && f[0] == "PASS" {
			return true
		}
	}
	return false
}
