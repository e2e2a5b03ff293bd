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

// XIDLost is the Xid the watch reports for a GPU NVML has lost
// (ERROR_GPU_IS_LOST): it has fallen off the bus, whether or not its Xid
// 79 came through.
const XIDLost = 79

// WatchXIDs implements dnvml.XIDWatcher with an NVML event set of every
// GPU's critical Xid events. A GPU that cannot report them
// (ERROR_NOT_SUPPORTED) is left out, saying so. Each GPU's UUID is read
// when it is registered, so that an event of a GPU that can no longer
// report its UUID (one that fell off the bus) is still its own. When the
// wait says a GPU is lost, the GPUs that no longer answer are reported
// lost (Xid 79), each once; when none can be told apart, every GPU is, as
// NVIDIA's own drivers do; and the watch waits before it waits again, so
// that a lost GPU does not make it spin.
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
	// uuids are the registered GPUs' UUIDs by handle; handles are the
	// registered GPUs in index order.
	uuids := map[nvml.Device]string{}
	var handles []nvml.Device
	for i := range count {
		d, ret := l.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			l.mu.Unlock()
			return fmt.Errorf("GPU at index %d: %w", i, &callError{call: "DeviceGetHandleByIndex", ret: ret})
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			// A GPU lost before the watch starts is not published either.
			logger.Info("A GPU that cannot report its UUID is not watched", "index", i, "err", &callError{call: "GetUUID", ret: ret})
			continue
		}
		switch ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret {
		case nvml.SUCCESS:
			watched++
			uuids[d] = uuid
			handles = append(handles, d)
		case nvml.ERROR_NOT_SUPPORTED:
			logger.Info("A GPU reports no Xid events; its failures go unnoticed", "index", i)
		default:
			l.mu.Unlock()
			return fmt.Errorf("GPU at index %d: %w", i, &callError{call: "RegisterEvents", ret: ret})
		}
	}
	l.mu.Unlock()
	logger.Info("Watching the GPUs' critical Xid events", "gpus", watched)
	lost := map[string]bool{}
	report := func(uuid string, xid int) {
		if xid == XIDLost {
			if lost[uuid] {
				return
			}
			lost[uuid] = true
		}
		emit(dnvml.XIDEvent{UUID: uuid, XID: xid})
	}
	// everyGPU reports an Xid for every registered GPU: NVML named none.
	everyGPU := func(xid int) {
		for _, d := range handles {
			report(uuids[d], xid)
		}
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(eventWait)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		case nvml.ERROR_GPU_IS_LOST:
			gone := 0
			for _, d := range handles {
				if _, ret := d.GetUUID(); ret == nvml.ERROR_GPU_IS_LOST {
					gone++
					report(uuids[d], XIDLost)
				}
			}
			if gone == 0 {
				logger.Info("NVML lost a GPU it does not name, and every GPU answers: reporting them all lost")
				everyGPU(XIDLost)
			}
			// A lost GPU's wait returns at once, every time.
			select {
			case <-ctx.Done():
			case <-timeAfterMs(eventWait):
			}
			continue
		default:
			return &callError{call: "EventSet.Wait", ret: ret}
		}
		if data.EventType != nvml.EventTypeXidCriticalError || data.Device == nil {
			continue
		}
		uuid, ok := uuids[data.Device]
		if !ok {
			uuid, ret = data.Device.GetUUID()
			if ret != nvml.SUCCESS {
				logger.Info("An Xid event of a GPU that cannot be told apart: reporting it for every GPU", "xid", data.EventData, "err", &callError{call: "GetUUID", ret: ret})
				everyGPU(int(data.EventData))
				continue
			}
		}
		report(uuid, int(data.EventData))
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
