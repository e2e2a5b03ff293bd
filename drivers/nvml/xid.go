package nvml

import "context"

// XIDEvent is a critical Xid event of a GPU, as NVML's event set reports
// it: the GPU's UUID and the Xid code.
type XIDEvent struct {
	UUID string
	XID  int
	// Unattributed: NVML said a GPU was lost without naming it, and this
	// GPU still answers: it is suspect, not known gone.
	Unattributed bool
	// Watched and Unwatched are no Xid: the watch now watches the GPU's
	// Xids (at its start, and again after a reset), or cannot (its events
	// cannot be registered): its health is unknown.
	Watched, Unwatched bool
}

// XIDWatcher is a Lister that reports GPUs' critical Xid events.
type XIDWatcher interface {
	// WatchXIDs hands every critical Xid event of the node's GPUs to emit,
	// and which GPUs it watches (Watched, Unwatched), until ctx ends or
	// NVML fails.
	WatchXIDs(ctx context.Context, emit func(XIDEvent)) error
}

// XIDInjector is a mock Lister whose event set takes Xid events from the
// lab, since go-nvml's mock servers have none: the lab's stand-in for a
// GPU that reports an error.
type XIDInjector interface {
	// InjectXID has the GPU report the Xid; after an Xid 79 the GPU has
	// fallen off the bus and answers as a lost GPU does.
	InjectXID(uuid string, xid int) error
	// ResetGPU has the GPU answer again, as after a reset.
	ResetGPU(uuid string) error
}
