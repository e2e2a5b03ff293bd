//go:build cgo

package nvmllib

import (
	"context"
	"testing"
	"time"

	"github.com/dralab/dralab/drivers/gpu"
	dnvml "github.com/dralab/dralab/drivers/nvml"
)

// go-nvml's mock servers have no event sets: Open patches EventSetCreate,
// RegisterEvents and Wait at this package's boundary, and InjectXID feeds
// the set, so that WatchXIDs runs the calls it makes on a real GPU.
func TestWatchXIDs(t *testing.T) {
	l, err := Open(dnvml.MockPrefix+"dgxh100", WithNode(node))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan dnvml.XIDEvent, 4)
	done := make(chan error, 1)
	go func() { done <- l.(dnvml.XIDWatcher).WatchXIDs(ctx, func(ev dnvml.XIDEvent) { events <- ev }) }()
	uuid := gpu.DeviceUUID(node, 2)
	// The watch registers its GPUs before it waits; an event injected
	// earlier would find no registration.
	time.Sleep(100 * time.Millisecond)
	if err := l.(dnvml.XIDInjector).InjectXID(uuid, 79); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-events:
		if ev != (dnvml.XIDEvent{UUID: uuid, XID: 79}) {
			t.Errorf("event %+v, want GPU 2's Xid 79", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no Xid event within 5 s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("WatchXIDs ended with %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Error("WatchXIDs did not end with its context")
	}
	if err := l.(dnvml.XIDInjector).InjectXID("GPU-nope", 79); err == nil {
		t.Error("an Xid of an unknown GPU was injected")
	}
}
