package allocation

import (
	"context"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
)

// A Vocabulary names a cluster's devices in the words of whoever reads the
// allocations, where the API has none: which tier of accelerator a device
// is ("h100"), what the devices a node counts are (a device plugin's
// extended resource names no device), which attribute names a partition's
// profile and what type a device is. The zero Vocabulary names no tier and
// no type, and reads no profile: the allocations are then read in the
// API's words alone, as on any cluster.
type Vocabulary struct {
	// Tier names the tier of a published device of driver; "" for a
	// device of no tier. An error is a selector's, which the reading
	// returns.
	Tier func(ctx context.Context, driver string, dev *resourceapi.Device) (string, error)
	// NodeTier names the tier of the devices node counts, from the node
	// alone; "" for none.
	NodeTier func(node *v1.Node) string
	// ProfileAttribute is the attribute that names a partition's profile
	// (a MIG profile, 1g.10gb), which Row.Profile and FreePartitions read.
	ProfileAttribute resourceapi.QualifiedName
	// DeviceType names the type of a device of driver (a whole device, a
	// partition, a time slice); "" where it has none to name.
	DeviceType func(driver string, dev *resourceapi.Device) string
	// TimeSliceType is the DeviceType of a time slice, which a row's
	// partition column names.
	TimeSliceType string
}

// tier is the tier of dev, "" without a Tier.
func (v Vocabulary) tier(ctx context.Context, driver string, dev *resourceapi.Device) (string, error) {
	if v.Tier == nil {
		return "", nil
	}
	return v.Tier(ctx, driver, dev)
}

// nodeTier is the tier of the devices node counts, "" without a NodeTier.
func (v Vocabulary) nodeTier(node *v1.Node) string {
	if v.NodeTier == nil {
		return ""
	}
	return v.NodeTier(node)
}

// deviceType is the type of dev, "" without a DeviceType.
func (v Vocabulary) deviceType(driver string, dev *resourceapi.Device) string {
	if v.DeviceType == nil {
		return ""
	}
	return v.DeviceType(driver, dev)
}
