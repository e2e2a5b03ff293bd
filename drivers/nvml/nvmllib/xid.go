//go:build cgo

package nvmllib

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"k8s.io/klog/v2"

	dnvml "github.com/dralab/dralab/drivers/nvml"
)

var (
	_ dnvml.XIDWatcher  = &lister{}
	_ dnvml.XIDInjector = &lister{}
)

// eventWait is how long one wait on the event set blocks, in ms: the
// watch notices the end of its context within it.
const eventWait = 500

// WatchXIDs implements dnvml.XIDWatcher with an NVML event set of every
// GPU's critical Xid events. A GPU that cannot report them
// (ERROR_NOT_SUPPORTED) is left out, saying so.
func (l *lister) WatchXIDs(ctx context.Context, emit func(dnvml.XIDEvent)) error {
	logger := klog.FromContext(ctx)
	l.mu.Lock()
	if l.lib == nil {
		l.mu.Unlock()
		return errors.New("NVML lister is closed")
	}
	set, ret := l.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		l.mu.Unlock()
		return &callError{call: "EventSetCreate", ret: ret}
	}
	defer set.Free()
	count, ret := l.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		l.mu.Unlock()
		return &callError{call: "DeviceGetCount", ret: ret}
	}
	watched := 0
	for i := range count {
		d, ret := l.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			l.mu.Unlock()
			return fmt.Errorf("GPU at index %d: %w", i, &callError{call: "DeviceGetHandleByIndex", ret: ret})
		}
		switch ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret {
		case nvml.SUCCESS:
			watched++
		case nvml.ERROR_NOT_SUPPORTED:
			logger.Info("A GPU reports no Xid events; its failures go unnoticed", "index", i)
		default:
			l.mu.Unlock()
			return fmt.Errorf("GPU at index %d: %w", i, &callError{call: "RegisterEvents", ret: ret})
		}
	}
	l.mu.Unlock()
	logger.Info("Watching the GPUs' critical Xid events", "gpus", watched)
	for ctx.Err() == nil {
		data, ret := set.Wait(eventWait)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			// The lost GPU's Xid 79 came before this; keep watching the others.
			continue
		default:
			return &callError{call: "EventSet.Wait", ret: ret}
		}
		if data.EventType != nvml.EventTypeXidCriticalError || data.Device == nil {
			continue
		}
		uuid, ret := data.Device.GetUUID()
		if ret != nvml.SUCCESS {
			logger.Error(&callError{call: "GetUUID", ret: ret}, "An Xid event of a GPU without a UUID", "xid", data.EventData)
			continue
		}
		emit(dnvml.XIDEvent{UUID: uuid, XID: int(data.EventData)})
	}
	return nil
}

// InjectXID implements dnvml.XIDInjector for mock sources: the Xid comes
// out of the mock's event set as NVML would report it.
func (l *lister) InjectXID(uuid string, xid int) error {
	if l.mockEvents == nil {
		return errors.New("Xid events can be injected into mock GPUs only")
	}
	l.mu.Lock()
	lib := l.lib
	l.mu.Unlock()
	if lib == nil {
		return errors.New("NVML lister is closed")
	}
	d, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %s: %w", uuid, &callError{call: "DeviceGetHandleByUUID", ret: ret})
	}
	l.mockEvents <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: uint64(xid)}
	return nil
}

// patchMockEvents gives a mock server the event sets that go-nvml's mock
// lacks (EventSetCreate, RegisterEvents, EventSet.Wait): every set waits on
// events, the lister's channel for injected ones, and reports those of the
// devices registered with it.
func patchMockEvents(s *server.Server, events chan nvml.EventData) {
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		registered := map[nvml.Device]uint64{}
		set := &mock.EventSet{}
		set.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
		set.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
			select {
			case ev := <-events:
				if registered[ev.Device]&ev.EventType == 0 {
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
				return ev, nvml.SUCCESS
			case <-timeAfterMs(timeoutMs):
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
		}
		for _, dev := range s.Devices {
			d := dev.(*server.Device)
			d.RegisterEventsFunc = func(types uint64, es nvml.EventSet) nvml.Return {
				if es == set {
					registered[d] |= types
				}
				return nvml.SUCCESS
			}
		}
		return set, nvml.SUCCESS
	}
}
