package nvml

import (
	"context"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/dralab/dralab/drivers/gpu"
)

// XIDEvent is a critical Xid event of a GPU, as NVML's event set reports
// it: the GPU's UUID and the Xid code.
type XIDEvent struct {
	UUID string
	XID  int
}

// XIDWatcher is a Lister that reports GPUs' critical Xid events.
type XIDWatcher interface {
	// WatchXIDs hands every critical Xid event of the node's GPUs to emit,
	// until ctx ends or NVML fails.
	WatchXIDs(ctx context.Context, emit func(XIDEvent)) error
}

// XIDInjector is a mock Lister whose event set takes Xid events from the
// lab, since go-nvml's mock servers have none: the lab's stand-in for a
// GPU that reports an error.
type XIDInjector interface {
	InjectXID(uuid string, xid int) error
}

// DeviceNamesByUUID maps GPU UUIDs to the names of the devices of each
// GPU: its whole device and its MIG devices.
func (inv *Inventory) DeviceNamesByUUID(ctx context.Context) (map[string][]string, error) {
	l, err := inv.list(ctx)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, d := range l.devices {
		for _, attr := range []resourceapi.QualifiedName{attrUUID, gpu.AttrParentUUID} {
			if v := d.API.Attributes[attr].StringValue; v != nil {
				out[*v] = append(out[*v], d.API.Name)
			}
		}
	}
	return out, nil
}
