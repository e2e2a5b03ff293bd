// Package fakesysfs writes the part of a sysfs tree that tells a PCI
// device's root complex and NUMA node, for tests of the NVML inventory.
package fakesysfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Write makes root a sysfs in which each bus ID ("0000:3b:00.0") sits
// under its root complex ("pci0000:3a"), behind a bridge as on a real
// server: bus/pci/devices/<id> is a relative link to
// devices/<root>/<bridge>/<id>, as the kernel writes it.
func Write(root string, rootOf map[string]string) error {
	links := filepath.Join(root, "bus", "pci", "devices")
	if err := os.MkdirAll(links, 0o755); err != nil {
		return err
	}
	for busID, rc := range rootOf {
		domainBus, ok := strings.CutPrefix(rc, "pci")
		if !ok {
			return fmt.Errorf("root complex %q: want pci<domain>:<bus>", rc)
		}
		rel := filepath.Join("devices", rc, domainBus+":01.0", busID)
		if err := os.MkdirAll(filepath.Join(root, rel), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join("..", "..", "..", rel), filepath.Join(links, busID)); err != nil {
			return err
		}
	}
	return nil
}

// SetNUMANode writes a device's NUMA node, as the kernel's numa_node file
// of the device (-1: no NUMA affinity). Write must have placed the device.
func SetNUMANode(root, busID string, node int) error {
	return os.WriteFile(filepath.Join(root, "bus", "pci", "devices", busID, "numa_node"), []byte(fmt.Sprintf("%d\n", node)), 0o644)
}
