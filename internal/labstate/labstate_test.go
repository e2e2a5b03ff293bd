package labstate

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

func TestClaimPID(t *testing.T) {
	d := Dir(t.TempDir())
	if err := d.ClaimPID(); err != nil {
		t.Fatal(err)
	}
	if pid, err := d.ReadPID(); err != nil || pid != os.Getpid() {
		t.Fatalf("ReadPID = %d, %v; want %d", pid, err, os.Getpid())
	}
	// A live other process holds it.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if err := os.WriteFile(d.PIDFile(), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.ClaimPID(); !errors.Is(err, ErrLocked) {
		t.Fatalf("ClaimPID with a live holder = %v, want ErrLocked", err)
	}
	// A dead holder is stale: the claim succeeds.
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := d.ClaimPID(); err != nil {
		t.Fatalf("ClaimPID over a dead holder: %v", err)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	d := Dir(t.TempDir())
	if _, err := d.ReadStatus(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadStatus without a file = %v", err)
	}
	in := &Status{Phase: PhaseRunning, PID: 42, Processes: []ProcessStatus{{Role: RoleNode, Node: "a", PID: 43, Running: true}}}
	if err := d.WriteStatus(in); err != nil {
		t.Fatal(err)
	}
	out, err := d.ReadStatus()
	if err != nil || out.Phase != PhaseRunning || out.PID != 42 || len(out.Processes) != 1 || out.Processes[0].Node != "a" {
		t.Fatalf("ReadStatus = %+v, %v", out, err)
	}
	// Atomic writes leave no temporary files behind.
	entries, _ := os.ReadDir(string(d))
	if len(entries) != 1 || entries[0].Name() != filepath.Base(d.StatusFile()) {
		t.Errorf("state dir holds %v", entries)
	}
}

func TestReadPIDRejectsGarbage(t *testing.T) {
	d := Dir(t.TempDir())
	_ = os.WriteFile(d.PIDFile(), []byte("not a pid"), 0o644)
	if _, err := d.ReadPID(); err == nil {
		t.Fatal("garbage PID accepted")
	}
}
