//go:build !linux

package nvml

import (
	"errors"
	"runtime"
)

// sysfsPCIeRoot: the PCIe root is read from Linux's sysfs; elsewhere a GPU
// has the attribute only when its backend reports it.
func sysfsPCIeRoot(_, _ string) (string, error) {
	return "", errors.New("the PCIe root is read from sysfs, which " + runtime.GOOS + " has not")
}

// sysfsNUMANode: the NUMA node is read from Linux's sysfs too.
func sysfsNUMANode(_, _ string) (int, error) {
	return 0, errors.New("the NUMA node is read from sysfs, which " + runtime.GOOS + " has not")
}
