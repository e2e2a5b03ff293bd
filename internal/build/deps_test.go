package build

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// go-nvml resolves NVML's symbols lazily, at their first call; a binary
// that also links Go's plugin package (kustomize, through Helm) is linked
// with BIND_NOW and dies at start on a machine without NVML ("symbol lookup
// error: undefined symbol: nvml…"). So go-nvml stays in the driver binary,
// and the driver binary stays away from plugin.
func TestNVMLAndPluginNeverShareABinary(t *testing.T) {
	deps := func(tags string, pkg string) []string {
		args := []string{"list", "-deps"}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, pkg)...).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	const nvml = "github.com/NVIDIA/go-nvml/pkg/nvml"
	driver := deps("", "github.com/dralab/dralab/cmd/"+DriverBinary)
	if !slices.Contains(driver, nvml) {
		t.Errorf("the driver does not link %s: the test no longer guards anything", nvml)
	}
	if slices.Contains(driver, "plugin") {
		t.Errorf("the driver links Go's plugin package next to go-nvml")
	}
	for _, pkg := range []string{"github.com/dralab/dralab/cmd/dralab", "github.com/dralab/dralab/magefiles"} {
		tags := ""
		if strings.HasSuffix(pkg, "magefiles") {
			tags = "mage"
		}
		if d := deps(tags, pkg); slices.Contains(d, nvml) {
			t.Errorf("%s links %s; only the driver may", pkg, nvml)
		}
	}
}
