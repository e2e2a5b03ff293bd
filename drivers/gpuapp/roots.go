package gpuapp

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dralab/dralab/drivers/nvml"
)

// An NVIDIA driver is installed on the host ("/") or by a driver container
// under a driver root of its own (/run/nvidia/driver), which holds the
// NVML library and, often, the device files. The driver finds both there,
// as NVIDIA's own drivers do; --nvml-library and --dev-root name them
// where the layout is another.

// nvmlLibrary is NVML's library, as the NVIDIA driver installs it.
const nvmlLibrary = nvml.Library

// nvmlLibraryPath is the NVML library to open: --nvml-library, else the
// library under a driver root other than "/", else "" (the loader's
// search, as on a host whose driver is installed).
func (o Options) nvmlLibraryPath() (string, error) {
	if o.NVMLLibrary != "" {
		if _, err := os.Stat(o.NVMLLibrary); err != nil {
			return "", fmt.Errorf("--nvml-library: %w", err)
		}
		return o.NVMLLibrary, nil
	}
	root := cmp.Or(o.DriverRoot, "/")
	if filepath.Clean(root) == "/" {
		return "", nil
	}
	dir, err := nvml.FindLibrary(root)
	if errors.Is(err, nvml.ErrNoLibrary) {
		return "", fmt.Errorf("--driver-root: %w; name it with --nvml-library", err)
	} else if err != nil {
		return "", fmt.Errorf("--driver-root: %w", err)
	}
	return filepath.Join(root, dir, nvmlLibrary), nil
}

// devRoot is the host directory of the NVIDIA device files: --dev-root,
// else the driver root's dev where it holds nvidiactl, else /dev.
func (o Options) devRoot() string {
	if o.DevRoot != "" {
		return o.DevRoot
	}
	root := cmp.Or(o.DriverRoot, "/")
	if dev := filepath.Join(root, "dev"); filepath.Clean(root) != "/" {
		if _, err := os.Stat(filepath.Join(dev, "nvidiactl")); err == nil {
			return dev
		}
	}
	return "/dev"
}
