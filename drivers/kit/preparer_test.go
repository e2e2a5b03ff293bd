package kit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
)

// preparingInventory is hardware that has to be set up per claim, like a
// MIG device's GPU and compute instances: it records what exists, and can
// be told to fail a device's preparation.
type preparingInventory struct {
	staticInventory
	mu sync.Mutex
	// live are the devices set up now; made counts every setup.
	live map[string]bool
	made int
	// failOn fails PrepareDevice of that device, after it set it up, as a
	// call that fails half-way does.
	failOn string
	// undone are UnprepareDevice's calls, as "device:state".
	undone []string
}

func (p *preparingInventory) PrepareDevice(_ context.Context, device string) (DevicePrepared, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live[device] {
		return DevicePrepared{}, fmt.Errorf("%s is set up already: a duplicate", device)
	}
	p.live[device] = true
	p.made++
	if device == p.failOn {
		return DevicePrepared{}, errors.New("injected failure")
	}
	state, _ := json.Marshal(map[string]string{"instance": "inst-" + device})
	return DevicePrepared{
		State:    state,
		Env:      map[string]string{"INSTANCE": "inst-" + device},
		ClaimEnv: map[string]string{"VISIBLE_DEVICES": "inst-" + device},
	}, nil
}

func (p *preparingInventory) UnprepareDevice(_ context.Context, device string, state json.RawMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.live, device)
	p.undone = append(p.undone, device+":"+compact(state))
	return nil
}

// compact is a state as the fake wrote it: the checkpoint indents it.
func compact(state json.RawMessage) string {
	var b bytes.Buffer
	if len(state) > 0 && json.Compact(&b, state) != nil {
		return "invalid JSON: " + string(state)
	}
	return b.String()
}

func (p *preparingInventory) liveDevices() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for d := range p.live {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

func newPreparingHarness(t *testing.T) (*harness, *preparingInventory) {
	inv := &preparingInventory{staticInventory: testDevices(3), live: map[string]bool{}}
	return newHarness(t, 0, func(o *Options) { o.Inventory = inv }), inv
}

// A device set up for a claim gives the container what its setup made,
// the checkpoint keeps its state, and unprepare tears it down with it.
func TestDevicePreparer(t *testing.T) {
	h, inv := newPreparingHarness(t)
	c := h.claim("c", "gpu-1", "gpu-2")
	res := h.prepare(c)[string(c.UID)]
	if res.Error != "" {
		t.Fatal(res.Error)
	}
	env := strings.Join(h.containerEnv(cdiIDs(res)), "\n") + "\n"
	for _, want := range []string{"GPU_DEVICE_0_INSTANCE=inst-gpu-1", "GPU_DEVICE_1_INSTANCE=inst-gpu-2", "VISIBLE_DEVICES=inst-gpu-1,inst-gpu-2\n"} {
		if !strings.Contains(env, want) {
			t.Errorf("container env lacks %s:\n%s", want, env)
		}
	}
	cp, err := ReadCheckpoint(h.opts.CheckpointPath)
	if err != nil {
		t.Fatal(err)
	}
	pc := cp.Claims[c.UID]
	if pc == nil || pc.Preparing || compact(pc.Devices[0].State) != `{"instance":"inst-gpu-1"}` {
		t.Fatalf("checkpointed claim = %+v, want it prepared with gpu-1's state", pc)
	}
	// The kubelet's repeated prepare sets nothing up again.
	if again := h.prepare(c)[string(c.UID)]; again.Error != "" || inv.made != 2 {
		t.Errorf("repeated prepare: error %q, %d setups, want none and 2", again.Error, inv.made)
	}
	if got := h.unprepare(c)[string(c.UID)]; got.Error != "" {
		t.Fatal(got.Error)
	}
	if live := inv.liveDevices(); len(live) != 0 {
		t.Errorf("set up after unprepare: %v", live)
	}
	want := []string{`gpu-2:{"instance":"inst-gpu-2"}`, `gpu-1:{"instance":"inst-gpu-1"}`}
	if !slices.Equal(inv.undone, want) {
		t.Errorf("undone %v, want %v (newest first, with their state)", inv.undone, want)
	}
}

// A setup that fails half-way is undone with what came before it, and the
// claim is not remembered: nothing is left set up, and a retry succeeds.
func TestDevicePreparerFailureUndoesEverything(t *testing.T) {
	h, inv := newPreparingHarness(t)
	inv.failOn = "gpu-2"
	c := h.claim("c", "gpu-0", "gpu-2")
	res := h.prepare(c)[string(c.UID)]
	if !strings.Contains(res.Error, "preparing device gpu-2: injected failure") {
		t.Fatalf("prepare error %q, want the device's failure", res.Error)
	}
	if live := inv.liveDevices(); len(live) != 0 {
		t.Errorf("left set up after a failed prepare: %v", live)
	}
	if want := []string{"gpu-2:", `gpu-0:{"instance":"inst-gpu-0"}`}; !slices.Equal(inv.undone, want) {
		t.Errorf("undone %v, want %v", inv.undone, want)
	}
	if got := h.driver.PreparedClaims(); len(got) != 0 {
		t.Errorf("the driver remembers %v after a failed prepare", got)
	}
	if files := h.specFiles(); len(files) != 0 {
		t.Errorf("a failed prepare left CDI specs: %v", files)
	}
	inv.failOn = ""
	if res := h.prepare(c)[string(c.UID)]; res.Error != "" {
		t.Errorf("retry: %s", res.Error)
	}
}

// A driver that stopped in the middle of a preparation (the claim is
// checkpointed as Preparing, a device set up but not recorded) undoes it
// when it starts again, and the kubelet's retry sets it up once.
func TestDevicePreparerUndoesWhatACrashLeft(t *testing.T) {
	h, inv := newPreparingHarness(t)
	c := h.claim("c", "gpu-1")
	if res := h.prepare(c)[string(c.UID)]; res.Error != "" {
		t.Fatal(res.Error)
	}
	// Rewind the checkpoint to the moment after the setup and before the
	// driver recorded it.
	cp, err := ReadCheckpoint(h.opts.CheckpointPath)
	if err != nil {
		t.Fatal(err)
	}
	pc := cp.Claims[c.UID]
	pc.Preparing, pc.CDISpec = true, ""
	pc.Devices[0].State, pc.Devices[0].Env, pc.Devices[0].ClaimEnv = nil, nil, nil
	if err := cp.save(h.opts.CheckpointPath); err != nil {
		t.Fatal(err)
	}
	for _, f := range h.specFiles() {
		if err := os.Remove(h.opts.CDIDir + "/" + f); err != nil {
			t.Fatal(err)
		}
	}
	h.restart()
	if live := inv.liveDevices(); len(live) != 0 {
		t.Errorf("still set up after the restart: %v", live)
	}
	if got := h.driver.PreparedClaims(); len(got) != 0 {
		t.Errorf("after the restart the driver remembers %v, want nothing", got)
	}
	if res := h.prepare(c)[string(c.UID)]; res.Error != "" {
		t.Fatalf("the kubelet's retry: %s", res.Error)
	}
	if live := inv.liveDevices(); !slices.Equal(live, []string{"gpu-1"}) {
		t.Errorf("set up after the retry: %v, want [gpu-1] once", live)
	}
}
