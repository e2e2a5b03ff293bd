//go:build cgo

package nvmllib

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/dralab/dralab/drivers/gpu"
	dnvml "github.com/dralab/dralab/drivers/nvml"
)

// openDGX opens go-nvml's dgxh100 mock as node's GPUs, closed with the
// test.
func openDGX(t *testing.T) *lister {
	t.Helper()
	l, err := Open(dnvml.MockPrefix+"dgxh100", WithNode(node))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l.(*lister)
}

// onWait has every event set the mock s creates from now on call fn before
// each of its waits.
func onWait(s *server.Server, fn func()) {
	create := s.EventSetCreateFunc
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		es, ret := create()
		if m, ok := es.(*mock.EventSet); ok {
			wait := m.WaitFunc
			m.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
				fn()
				return wait(ms)
			}
		}
		return es, ret
	}
}

// go-nvml's mock servers have no event sets: Open patches EventSetCreate,
// RegisterEvents and Wait at this package's boundary, and InjectXID feeds
// the set, so that WatchXIDs runs the calls it makes on a real GPU.
func TestWatchXIDs(t *testing.T) {
	l := openDGX(t)
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan dnvml.XIDEvent, 4)
	done := make(chan error, 1)
	go func() { done <- dnvml.XIDWatcher(l).WatchXIDs(ctx, xidsOnly(func(ev dnvml.XIDEvent) { events <- ev })) }()
	uuid := gpu.DeviceUUID(node, 2)
	// The watch registers its GPUs before it waits; an event injected
	// earlier would find no registration.
	time.Sleep(100 * time.Millisecond)
	if err := dnvml.XIDInjector(l).InjectXID(uuid, 79); err != nil {
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
	if err := dnvml.XIDInjector(l).InjectXID("GPU-nope", 79); err == nil {
		t.Error("an Xid of an unknown GPU was injected")
	}
}

// watchLost starts WatchXIDs on a dgxh100 mock whose event set's wait
// says a GPU is lost, every time and at once, as real drivers do after an
// Xid 79; lost are the GPUs (by index) that answer ERROR_GPU_IS_LOST once
// the watch has started. It returns the events reported within a second
// and how many times the watch waited.
func watchLost(t *testing.T, lost ...int) ([]dnvml.XIDEvent, int64) {
	t.Helper()
	l := openDGX(t)
	s := l.lib.(*server.Server)
	var waits atomic.Int64
	// Every wait says a GPU is lost: with none named (lost empty), always;
	// else while a lost GPU is in the set, as NVML does; a set without
	// them waits out its timeout.
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		var registered []*server.Device
		for _, dev := range s.Devices {
			d := dev.(*server.Device)
			d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return {
				registered = append(registered, d)
				return nvml.SUCCESS
			}
		}
		return &mock.EventSet{
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
			WaitFunc: func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
				if len(lost) == 0 || slices.ContainsFunc(registered, func(d *server.Device) bool {
					_, ret := d.GetUUID()
					return ret == nvml.ERROR_GPU_IS_LOST
				}) {
					return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
				}
				<-timeAfterMs(timeoutMs)
				return nvml.EventData{}, nvml.ERROR_TIMEOUT
			},
		}, nvml.SUCCESS
	}
	var mu sync.Mutex
	var events []dnvml.XIDEvent
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The GPUs fall off the bus once they are registered: the first wait.
	for _, i := range lost {
		d := s.Devices[i].(*server.Device)
		uuid, _ := d.GetUUID()
		d.GetUUIDFunc = func() (string, nvml.Return) {
			select {
			case <-started:
				return "", nvml.ERROR_GPU_IS_LOST
			default:
				return uuid, nvml.SUCCESS
			}
		}
	}
	onWait(s, func() {
		waits.Add(1)
		select {
		case <-started:
		default:
			close(started)
		}
	})
	go func() {
		done <- dnvml.XIDWatcher(l).WatchXIDs(ctx, xidsOnly(func(ev dnvml.XIDEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, ev)
		}))
	}()
	time.Sleep(time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchXIDs ended with %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	return events, waits.Load()
}

// A wait that says a GPU is lost reports the GPU that no longer answers
// as fallen off the bus (Xid 79), once, and does not make the watch spin:
// the wait returns at once every time, and the watch waited over a million
// times in 4 s before.
func TestWatchXIDsLostGPU(t *testing.T) {
	events, waits := watchLost(t, 2)
	want := []dnvml.XIDEvent{{UUID: gpu.DeviceUUID(node, 2), XID: XIDLost}}
	if !slices.Equal(events, want) {
		t.Errorf("events %+v, want GPU 2's Xid 79 once", events)
	}
	if waits > 10 {
		t.Errorf("the watch waited %d times in a second on a lost GPU, want a pause between waits", waits)
	}
}

// A lost GPU that NVML does not name, every GPU still answering: every
// GPU is reported suspect (unattributed), once each, as NVIDIA's drivers
// mark the node's devices unhealthy when they cannot tell which one
// failed; none is reported gone.
func TestWatchXIDsLostGPUUnnamed(t *testing.T) {
	events, _ := watchLost(t)
	if len(events) != 8 {
		t.Fatalf("%d events, want one for each of the 8 GPUs: %+v", len(events), events)
	}
	for i, ev := range events {
		if ev != (dnvml.XIDEvent{UUID: gpu.DeviceUUID(node, i), XID: XIDLost, Unattributed: true}) {
			t.Errorf("event %d: %+v, want GPU %d's Xid 79, unattributed", i, ev, i)
		}
	}
}

// The Xid of a GPU that can no longer report its UUID (it fell off the
// bus) is still its own: the watch read the UUID when it registered the
// GPU. Before, the event was logged and dropped, and the GPU stayed
// schedulable.
func TestWatchXIDsOfAGPUWithoutUUID(t *testing.T) {
	l := openDGX(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan dnvml.XIDEvent, 4)
	go func() { _ = dnvml.XIDWatcher(l).WatchXIDs(ctx, xidsOnly(func(ev dnvml.XIDEvent) { events <- ev })) }()
	time.Sleep(100 * time.Millisecond)
	d, ret := l.lib.DeviceGetHandleByIndex(3)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	d.(*server.Device).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	l.mockEvents.events <- nvml.EventData{Device: d, EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	select {
	case ev := <-events:
		if ev != (dnvml.XIDEvent{UUID: gpu.DeviceUUID(node, 3), XID: 79}) {
			t.Errorf("event %+v, want GPU 3's Xid 79", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the Xid of a GPU without a UUID was dropped")
	}
}

// A mock GPU injected an Xid 79 falls off the bus as a real one does: it
// reports the Xid once, then answers ERROR_GPU_IS_LOST, and so does every
// wait, which the watch does not spin on; reset, it answers again, and a
// second Xid 79 is reported again.
func TestInjectedXID79LosesTheMockGPU(t *testing.T) {
	l := openDGX(t)
	var waits atomic.Int64
	onWait(l.lib.(*server.Server), func() { waits.Add(1) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan dnvml.XIDEvent, 16)
	go func() { _ = dnvml.XIDWatcher(l).WatchXIDs(ctx, xidsOnly(func(ev dnvml.XIDEvent) { events <- ev })) }()
	time.Sleep(100 * time.Millisecond)
	uuid := gpu.DeviceUUID(node, 3)
	injected := dnvml.XIDInjector(l)
	expectOne := func(what string) {
		t.Helper()
		select {
		case ev := <-events:
			if ev != (dnvml.XIDEvent{UUID: uuid, XID: 79}) {
				t.Errorf("%s: event %+v, want GPU 3's Xid 79", what, ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no event", what)
		}
	}
	if err := injected.InjectXID(uuid, 79); err != nil {
		t.Fatal(err)
	}
	expectOne("Xid 79")
	before := waits.Load()
	time.Sleep(time.Second)
	if n := waits.Load() - before; n > 4 {
		t.Errorf("the watch waited %d times in a second on a lost GPU", n)
	}
	select {
	case ev := <-events:
		t.Errorf("after the Xid, another event %+v: a lost GPU is reported once", ev)
	default:
	}
	d, _ := l.lib.DeviceGetHandleByIndex(3)
	if _, ret := d.GetUUID(); ret != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("a GPU fallen off the bus answers GetUUID with %v, want ERROR_GPU_IS_LOST", ret)
	}
	if err := injected.ResetGPU(uuid); err != nil {
		t.Fatal(err)
	}
	if got, ret := d.GetUUID(); ret != nvml.SUCCESS || got != uuid {
		t.Errorf("reset, the GPU answers %q, %v", got, ret)
	}
	// The watch registers the GPU again at its next quiet wait.
	time.Sleep(3 * eventWait * time.Millisecond)
	if err := injected.InjectXID(uuid, 79); err != nil {
		t.Fatal(err)
	}
	expectOne("a second Xid 79 after a reset")
}

// A lost GPU does not blind the watch to the others: while a lost GPU is
// in an event set, NVML answers every wait with the loss, so the watch
// makes its set again without it; another GPU's Xid then comes through.
func TestLostGPUDoesNotBlindTheWatch(t *testing.T) {
	l := openDGX(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	events := make(chan dnvml.XIDEvent, 16)
	go func() { _ = dnvml.XIDWatcher(l).WatchXIDs(ctx, xidsOnly(func(ev dnvml.XIDEvent) { events <- ev })) }()
	time.Sleep(100 * time.Millisecond)
	injected := dnvml.XIDInjector(l)
	expect := func(want dnvml.XIDEvent) {
		t.Helper()
		select {
		case ev := <-events:
			if ev != want {
				t.Errorf("event %+v, want %+v", ev, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event; want %+v", want)
		}
	}
	lostGPU, other := gpu.DeviceUUID(node, 3), gpu.DeviceUUID(node, 5)
	if err := injected.InjectXID(lostGPU, 79); err != nil {
		t.Fatal(err)
	}
	expect(dnvml.XIDEvent{UUID: lostGPU, XID: 79})
	if err := injected.InjectXID(other, 48); err != nil {
		t.Fatal(err)
	}
	expect(dnvml.XIDEvent{UUID: other, XID: 48})
}

// xidsOnly hands f the Xid events alone, not which GPUs are watched.
func xidsOnly(f func(dnvml.XIDEvent)) func(dnvml.XIDEvent) {
	return func(ev dnvml.XIDEvent) {
		if !ev.Watched && !ev.Unwatched {
			f(ev)
		}
	}
}

// A GPU whose handle NVML cannot give (lost before the watch starts), and
// one whose events cannot be registered, do not stop the watch: the
// others are watched, said so, and the one that cannot be is said
// unwatched; an Xid of a watched GPU still comes through. Before, either
// ended the watch and every GPU ran unmonitored.
func TestWatchGoesOnWithoutAGPU(t *testing.T) {
	l := openDGX(t)
	s := l.lib.(*server.Server)
	byIndex := s.DeviceGetHandleByIndexFunc
	s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 1 {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return byIndex(i)
	}
	create := s.EventSetCreateFunc
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		set, ret := create()
		d := s.Devices[4].(*server.Device)
		d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_UNKNOWN }
		return set, ret
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var got []dnvml.XIDEvent
	done := make(chan error, 1)
	go func() {
		done <- dnvml.XIDWatcher(l).WatchXIDs(ctx, func(ev dnvml.XIDEvent) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, ev)
		})
	}()
	time.Sleep(200 * time.Millisecond)
	if err := dnvml.XIDInjector(l).InjectXID(gpu.DeviceUUID(node, 6), 48); err != nil {
		t.Fatal(err)
	}
	time.Sleep(700 * time.Millisecond)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("WatchXIDs ended with %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	var watched, unwatched []string
	xid := false
	for _, ev := range got {
		switch {
		case ev.Watched:
			watched = append(watched, ev.UUID)
		case ev.Unwatched:
			unwatched = append(unwatched, ev.UUID)
		case ev == (dnvml.XIDEvent{UUID: gpu.DeviceUUID(node, 6), XID: 48}):
			xid = true
		}
	}
	if len(watched) != 6 || slices.Contains(watched, gpu.DeviceUUID(node, 1)) || slices.Contains(watched, gpu.DeviceUUID(node, 4)) {
		t.Errorf("watched %v; want the 6 GPUs but 1 (no handle) and 4 (no registration)", watched)
	}
	if !slices.Equal(unwatched, []string{gpu.DeviceUUID(node, 4)}) {
		t.Errorf("unwatched %v; want GPU 4's alone", unwatched)
	}
	if !xid {
		t.Errorf("GPU 6's Xid 48 did not come through: %+v", got)
	}
}
