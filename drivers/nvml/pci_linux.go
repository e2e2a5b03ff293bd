package nvml

import "k8s.io/dynamic-resource-allocation/deviceattribute"

// sysfsPCIeRoot reads a device's root complex from the sysfs mounted at
// root: /sys/bus/pci/devices/<busID> links to its place in the device
// tree, /sys/devices/pci<domain>:<bus>/…/<busID>.
func sysfsPCIeRoot(root, busID string) (string, error) {
	attr, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID, deviceattribute.WithFSFromRoot(root))
	if err != nil {
		return "", err
	}
	return *attr.Value.StringValue, nil
}

// sysfsNUMANode reads a device's NUMA node from the sysfs mounted at root:
// /sys/bus/pci/devices/<busID>/numa_node; a device without affinity (-1)
// is an error.
func sysfsNUMANode(root, busID string) (int, error) {
	attr, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(busID, deviceattribute.ScalarAttribute, deviceattribute.WithFSFromRoot(root))
	if err != nil {
		return 0, err
	}
	return int(*attr.Value.IntValue), nil
}
