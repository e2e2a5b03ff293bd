package gpuapp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/drivers/nvml"
)

// A driver root holds the NVML library and the device files, as a driver
// container installs them; --nvml-library and --dev-root name them where
// the layout is another; on the host ("/") the loader finds the library
// and the device files are in /dev.
func TestDriverRoot(t *testing.T) {
	root := t.TempDir()
	lib := filepath.Join(root, "usr/lib/x86_64-linux-gnu", nvmlLibrary)
	for _, f := range []string{lib, filepath.Join(root, "dev", "nvidiactl")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	o := Options{DriverRoot: root}
	if got, err := o.nvmlLibraryPath(); err != nil || got != lib {
		t.Errorf("library under --driver-root %s = %q, %v; want %s", root, got, err, lib)
	}
	if got := o.devRoot(); got != filepath.Join(root, "dev") {
		t.Errorf("device files under --driver-root = %s, want %s/dev", got, root)
	}
	host := Options{DriverRoot: "/"}
	if got, err := host.nvmlLibraryPath(); err != nil || got != "" {
		t.Errorf("on the host: library %q, %v; want the loader's search", got, err)
	}
	if got := host.devRoot(); got != "/dev" {
		t.Errorf("on the host: device files in %s, want /dev", got)
	}
	explicit := Options{DriverRoot: root, NVMLLibrary: lib, DevRoot: "/somewhere/dev"}
	if got, _ := explicit.nvmlLibraryPath(); got != lib {
		t.Errorf("--nvml-library %s: %q", lib, got)
	}
	if got := explicit.devRoot(); got != "/somewhere/dev" {
		t.Errorf("--dev-root /somewhere/dev: %s", got)
	}
	empty := Options{DriverRoot: t.TempDir()}
	if _, err := empty.nvmlLibraryPath(); err == nil || !strings.Contains(err.Error(), "holds no NVML library") || !strings.Contains(err.Error(), "usr/lib64/"+nvmlLibrary) {
		t.Errorf("a driver root without the library: %v, want an error saying where it looked", err)
	}
	if got := empty.devRoot(); got != "/dev" {
		t.Errorf("a driver root without device files: %s, want /dev", got)
	}
	if _, err := (Options{NVMLLibrary: filepath.Join(root, "nowhere.so")}).nvmlLibraryPath(); err == nil || !strings.Contains(err.Error(), "--nvml-library") {
		t.Errorf("a missing --nvml-library: %v", err)
	}
}

// The roots reach the NVML inventory: its device files' host directory and
// the sysfs tree its PCIe roots and NUMA nodes are read from (a mock's
// rendered tree).
func TestRootsReachTheInventory(t *testing.T) {
	sysfs := t.TempDir()
	o := Options{Inventory: InventoryNVML, NVML: nvml.MockPrefix + "dgxh100", NodeFlags: kit.NodeFlags{NodeName: "n"}, SysfsRoot: sysfs, DevRoot: "/run/nvidia/driver/dev"}
	inv, err := nvmlInventory(o)
	if err != nil {
		t.Fatal(err)
	}
	defer inv.Close()
	if inv.SysfsRoot != sysfs || inv.DevRoot != "/run/nvidia/driver/dev" {
		t.Errorf("inventory roots sysfs %q, dev %q; want %q, /run/nvidia/driver/dev", inv.SysfsRoot, inv.DevRoot, sysfs)
	}
}
