package kit

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
)

// CheckNames refuses a device attribute or capacity name qualified with the
// driver's own domain ("gpu.example.com/model" published by
// gpu.example.com). The API stores such a name as given, but CEL, the
// allocator and matchAttribute see the unqualified "model" of the driver's
// domain and the qualified one as two names of one attribute, and
// Kubernetes 1.38's kubelet-plugin helper refuses a pool with one. A driver
// on the kit publishes its own names unqualified and everyone else's
// (resource.kubernetes.io/numaNode, another vendor's) qualified.
func CheckNames(driver string, devs []resourceapi.Device) error {
	own := driver + "/"
	for _, d := range devs {
		for _, name := range slices.Sorted(maps.Keys(d.Attributes)) {
			if strings.HasPrefix(string(name), own) {
				return ownDomainError(driver, d.Name, "attribute", string(name))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(d.Capacity)) {
			if strings.HasPrefix(string(name), own) {
				return ownDomainError(driver, d.Name, "capacity", string(name))
			}
		}
	}
	return nil
}

func ownDomainError(driver, device, kind, name string) error {
	return fmt.Errorf("device %s: %s name %q is qualified with the driver's own domain %s: publish it as %q (Kubernetes 1.38's kubelet-plugin helper refuses the qualified form)",
		device, kind, name, driver, strings.TrimPrefix(name, driver+"/"))
}
