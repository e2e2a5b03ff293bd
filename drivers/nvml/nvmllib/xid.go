//go:build cgo

package nvmllib

import (
	"context"
	"errors"
	"fmt"
	"sync"

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
// lost (Xid 79), each once, and the event set is made again without them:
// while a lost GPU is in a set, NVML answers every wait of it with the
// loss, and the other GPUs' Xids would go unseen. A lost GPU that answers
// again (reset) is watched again. When none can be told apart, every GPU
// is reported suspect (Unattributed), once, and the watch waits before it
// waits again, so that a lost GPU does not make it spin.
func (l *lister) WatchXIDs(ctx context.Context, emit func(dnvml.XIDEvent)) error {
	logger := klog.FromContext(ctx)
	l.mu.Lock()
	if l.lib == nil {
		l.mu.Unlock()
		return errors.New("NVML lister is closed")
	}
	count, ret := l.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		l.mu.Unlock()
		return &callError{call: "DeviceGetCount", ret: ret}
	}
	// uuids are the GPUs' UUIDs by handle; handles are the GPUs in index
	// order.
	uuids := map[nvml.Device]string{}
	var handles []nvml.Device
	for i := range count {
		d, ret := l.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			// A GPU lost before the watch starts: the others are watched.
			logger.Info("A GPU without a handle is not watched", "index", i, "err", &callError{call: "DeviceGetHandleByIndex", ret: ret})
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			// A GPU lost before the watch starts is not published either.
			logger.Info("A GPU that cannot report its UUID is not watched", "index", i, "err", &callError{call: "GetUUID", ret: ret})
			continue
		}
		uuids[d] = uuid
		handles = append(handles, d)
	}
	l.mu.Unlock()
	// lost are the GPUs known to have fallen off the bus: the watch
	// reports a GPU lost by its waits once, and not after its Xid 79,
	// and leaves it out of its event set until it answers again.
	lost := map[string]bool{}
	// suspect are the GPUs reported when NVML lost one it did not name.
	suspect := map[string]bool{}
	unsupported := map[nvml.Device]bool{}
	var (
		set        nvml.EventSet
		registered []nvml.Device
	)
	defer func() {
		if set != nil {
			set.Free()
		}
	}()
	// watching are the GPUs whose Xids the set takes, as last emitted.
	watching := map[string]bool{}
	// watch makes the event set of the GPUs not lost, and says which
	// GPUs it watches now and which it cannot: said outside the lister's
	// lock, since what hears it may publish.
	watch := func() error {
		var said []dnvml.XIDEvent
		defer func() {
			for _, ev := range said {
				emit(ev)
			}
		}()
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.lib == nil {
			return errors.New("NVML lister is closed")
		}
		if set != nil {
			set.Free()
			set, registered = nil, nil
		}
		s, ret := l.lib.EventSetCreate()
		if ret != nvml.SUCCESS {
			return &callError{call: "EventSetCreate", ret: ret}
		}
		set = s
		for i, d := range handles {
			uuid := uuids[d]
			if lost[uuid] {
				continue // failed, reported as such
			}
			ret := nvml.ERROR_NOT_SUPPORTED
			if !unsupported[d] {
				ret = d.RegisterEvents(nvml.EventTypeXidCriticalError, set)
			}
			switch ret {
			case nvml.SUCCESS:
				registered = append(registered, d)
				if !watching[uuid] {
					watching[uuid] = true
					said = append(said, dnvml.XIDEvent{UUID: uuid, Watched: true})
				}
				continue
			case nvml.ERROR_NOT_SUPPORTED:
				if !unsupported[d] {
					unsupported[d] = true
					logger.Info("A GPU reports no Xid events; its failures go unnoticed", "index", i)
				}
			default:
				logger.Info("A GPU's Xid events cannot be registered; its failures go unnoticed", "index", i, "err", &callError{call: "RegisterEvents", ret: ret})
			}
			if w, known := watching[uuid]; w || !known {
				watching[uuid] = false
				said = append(said, dnvml.XIDEvent{UUID: uuid, Unwatched: true})
			}
		}
		return nil
	}
	if err := watch(); err != nil {
		return err
	}
	logger.Info("Watching the GPUs' critical Xid events", "gpus", len(registered))
	report := func(uuid string, xid int) {
		if xid == XIDLost {
			lost[uuid] = true
		}
		emit(dnvml.XIDEvent{UUID: uuid, XID: xid})
	}
	reportLost := func(uuid string) bool {
		if lost[uuid] {
			return false
		}
		report(uuid, XIDLost)
		return true
	}
	// answering are the GPUs in lost that answer again.
	answering := func() []string {
		var back []string
		for _, d := range handles {
			if _, ret := d.GetUUID(); lost[uuids[d]] && ret == nvml.SUCCESS {
				back = append(back, uuids[d])
			}
		}
		return back
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(eventWait)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			if back := answering(); len(back) > 0 {
				// Reset: watched again.
				for _, uuid := range back {
					delete(lost, uuid)
				}
				logger.Info("Lost GPUs answer again: watching them", "gpus", back)
				if err := watch(); err != nil {
					return err
				}
			}
			continue
		case nvml.ERROR_GPU_IS_LOST:
			var gone, others []string
			for _, d := range registered {
				if _, ret := d.GetUUID(); ret == nvml.ERROR_GPU_IS_LOST {
					gone = append(gone, uuids[d])
				} else {
					others = append(others, uuids[d])
				}
			}
			if len(gone) == 0 {
				// Every GPU answers: NVML has not said which one it lost.
				// Each is suspect, reported once as such: kept from new
				// work, as NVIDIA's drivers mark every device unhealthy
				// on a wait error, none known gone.
				newly := false
				for _, uuid := range others {
					if !suspect[uuid] && !lost[uuid] {
						suspect[uuid], newly = true, true
						emit(dnvml.XIDEvent{UUID: uuid, XID: XIDLost, Unattributed: true})
					}
				}
				if newly {
					logger.Info("NVML lost a GPU it does not name, and every GPU answers: reporting them all suspect")
				}
				// A lost GPU's wait returns at once, every time.
				select {
				case <-ctx.Done():
				case <-timeAfterMs(eventWait):
				}
				continue
			}
			for _, uuid := range gone {
				reportLost(uuid)
			}
			// The others go on being watched, in a set without the
			// lost GPUs.
			if err := watch(); err != nil {
				return err
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
				for _, d := range registered {
					report(uuids[d], int(data.EventData))
				}
				continue
			}
		}
		report(uuid, int(data.EventData))
	}
	return nil
}

// mockEvents are what a mock source's event sets report: the Xid events
// injected, and the GPUs that have fallen off the bus (an Xid 79), which
// answer ERROR_GPU_IS_LOST until they are reset, as NVML's do.
type mockEvents struct {
	events chan nvml.EventData
	mu     sync.Mutex
	lost   map[nvml.Device]bool
}

func (m *mockEvents) setLost(d nvml.Device, lost bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if lost {
		m.lost[d] = true
	} else {
		delete(m.lost, d)
	}
}

func (m *mockEvents) isLost(d nvml.Device) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lost[d]
}

// anyLost tells whether a GPU of the set has fallen off the bus.
func (m *mockEvents) anyLost(registered map[nvml.Device]uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for d := range m.lost {
		if registered[d] != 0 {
			return true
		}
	}
	return false
}

// mockDevice is a mock source's GPU of that UUID.
func (l *lister) mockDevice(uuid string) (nvml.Device, error) {
	if l.mockEvents == nil {
		return nil, errors.New("Xid events can be injected into mock GPUs only")
	}
	l.mu.Lock()
	lib := l.lib
	l.mu.Unlock()
	if lib == nil {
		return nil, errors.New("NVML lister is closed")
	}
	d, ret := lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: %w", uuid, &callError{call: "DeviceGetHandleByUUID", ret: ret})
	}
	return d, nil
}

// InjectXID implements dnvml.XIDInjector for mock sources: the Xid comes
// out of the mock's event set as NVML would report it. After an Xid 79
// the GPU has fallen off the bus: it answers ERROR_GPU_IS_LOST, and so do
// the event set's waits, until ResetGPU.
func (l *lister) InjectXID(uuid string, xid int) error {
	d, err := l.mockDevice(uuid)
	if err != nil {
		return err
	}
	l.mockEvents.events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: uint64(xid)}
	if xid == XIDLost {
		l.mockEvents.setLost(d, true)
	}
	return nil
}

// ResetGPU implements dnvml.XIDInjector: the mock GPU answers again, as a
// real one after a reset.
func (l *lister) ResetGPU(uuid string) error {
	d, err := l.mockDevice(uuid)
	if err != nil {
		return err
	}
	l.mockEvents.setLost(d, false)
	return nil
}

// patchMockEvents gives a mock server the event sets that go-nvml's mock
// lacks (EventSetCreate, RegisterEvents, EventSet.Wait): while a device
// registered with a set has fallen off the bus, every wait of the set
// answers ERROR_GPU_IS_LOST at once, as NVML's do; else a set reports the
// injected events of the devices registered with it;
// a lost GPU answers ERROR_GPU_IS_LOST for its UUID.
func patchMockEvents(s *server.Server, m *mockEvents) {
	for _, dev := range s.Devices {
		d := dev.(*server.Device)
		uuid := d.GetUUIDFunc
		d.GetUUIDFunc = func() (string, nvml.Return) {
			if m.isLost(d) {
				return "", nvml.ERROR_GPU_IS_LOST
			}
			return uuid()
		}
	}
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		registered := map[nvml.Device]uint64{}
		set := &mock.EventSet{}
		set.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
		deliver := func(ev nvml.EventData) (nvml.EventData, nvml.Return) {
			if registered[ev.Device]&ev.EventType == 0 {
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			}
			return ev, nvml.SUCCESS
		}
		set.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
			// As NVML: while a GPU of the set is lost, every wait says
			// so at once, before any event of the others.
			if m.anyLost(registered) {
				return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
			}
			select {
			case ev := <-m.events:
				return deliver(ev)
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
