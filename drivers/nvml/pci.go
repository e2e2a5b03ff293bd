package nvml

import (
	"fmt"
	"strconv"
	"strings"
)

// normalizeBusID turns a PCI address as NVML writes it, with an 8-digit
// domain in upper case ("00000000:3B:00.0"), into the form of sysfs and of
// the standard pciBusID attribute ("0000:3b:00.0").
func normalizeBusID(id string) (string, error) {
	domain, rest, ok := strings.Cut(id, ":")
	if !ok {
		return "", fmt.Errorf("PCI bus ID %q: want domain:bus:device.function", id)
	}
	bus, rest, ok := strings.Cut(rest, ":")
	if !ok {
		return "", fmt.Errorf("PCI bus ID %q: want domain:bus:device.function", id)
	}
	device, function, ok := strings.Cut(rest, ".")
	if !ok {
		return "", fmt.Errorf("PCI bus ID %q: want domain:bus:device.function", id)
	}
	var parts [4]uint64
	for i, p := range []struct {
		name  string
		text  string
		limit uint64
	}{
		// NVML has room for 32-bit domains, but the standard attribute
		// only for 16-bit ones, which is all sysfs names outside VMD.
		{"domain", domain, 0xffff},
		{"bus", bus, 0xff},
		{"device", device, 0x1f},
		{"function", function, 0x7},
	} {
		v, err := strconv.ParseUint(p.text, 16, 32)
		if err != nil || v > p.limit {
			return "", fmt.Errorf("PCI bus ID %q: %s %q is not a hexadecimal number up to %#x", id, p.name, p.text, p.limit)
		}
		parts[i] = v
	}
	return fmt.Sprintf("%04x:%02x:%02x.%x", parts[0], parts[1], parts[2], parts[3]), nil
}
