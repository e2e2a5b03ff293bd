package labstate

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dralab/dralab/internal/procid"
)

func TestClaimPID(t *testing.T) {
	d := Dir(t.TempDir())
	self, release, err := d.ClaimPID()
	if err != nil {
		t.Fatal(err)
	}
	release()
	if id, err := d.ReadProcess(); err != nil || id != self || id.PID != os.Getpid() || id.StartTime == 0 {
		t.Fatalf("ReadProcess = %+v, %v; want this process %+v", id, err, self)
	}
	// A live other process holds it.
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	holder, err := procid.Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	writeID(t, d.PIDFile(), holder)
	if _, _, err := d.ClaimPID(); !errors.Is(err, ErrLocked) {
		t.Fatalf("ClaimPID with a live holder = %v, want ErrLocked", err)
	}
	// The same PID with another start time is another process: the lab
	// that recorded it is gone, its claim stale.
	stale := holder
	stale.StartTime++
	writeID(t, d.PIDFile(), stale)
	if _, release, err := d.ClaimPID(); err != nil {
		t.Fatalf("ClaimPID over a holder whose PID was reused: %v", err)
	} else {
		release()
	}
	// A dead holder is stale: the claim succeeds.
	writeID(t, d.PIDFile(), holder)
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if _, release, err := d.ClaimPID(); err != nil {
		t.Fatalf("ClaimPID over a dead holder: %v", err)
	} else {
		release()
	}
}

// TestClaimPIDAtOnce: of lab processes that claim one state directory at
// the same moment (two lab:up in two terminals), exactly one gets it, and
// the directory is free again once it ends.
func TestClaimPIDAtOnce(t *testing.T) {
	d := Dir(t.TempDir())
	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var won []func()
	lost := 0
	start := make(chan struct{})
	for range n {
		wg.Go(func() {
			<-start
			_, release, err := d.ClaimPID()
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won = append(won, release)
			case errors.Is(err, ErrLocked):
				lost++
			default:
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(won) != 1 || lost != n-1 {
		t.Fatalf("%d claims at once: %d got the state directory, %d were refused; want 1 and %d", n, len(won), lost, n-1)
	}
	won[0]()
	_, release, err := d.ClaimPID()
	if err != nil {
		t.Fatalf("ClaimPID after the holder released it: %v", err)
	}
	release()
}

// A killed lab process's lock can outlive what /proc shows of it: the
// kernel drops it when the last of its threads has exited. A resume that
// finds the lock held while the recorded lab process has ended waits for
// it; one whose recorded process still runs is refused at once.
func TestClaimPIDWaitsForAnEndedHoldersLock(t *testing.T) {
	d := Dir(t.TempDir())
	ended := exec.Command("true")
	if err := ended.Start(); err != nil {
		t.Fatal(err)
	}
	id, err := procid.OfChild(ended.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := ended.Wait(); err != nil {
		t.Fatal(err)
	}
	writeID(t, d.PIDFile(), id)
	// The ended process's lock, still held for a moment.
	held, err := TryLock(d.LockFile())
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(300*time.Millisecond, held)
	_, release, err := d.ClaimPID()
	if err != nil {
		t.Fatalf("ClaimPID while an ended lab process's lock was released: %v", err)
	}
	release()

	// A live holder: refused without waiting.
	self, _ := procid.Self()
	held, err = TryLock(d.LockFile())
	if err != nil {
		t.Fatal(err)
	}
	defer held()
	writeID(t, d.PIDFile(), self)
	start := time.Now()
	if _, _, err := d.ClaimPID(); !errors.Is(err, ErrLocked) || time.Since(start) > lockGrace/2 {
		t.Fatalf("ClaimPID while a live lab process holds the lock = %v after %s, want ErrLocked at once", err, time.Since(start))
	}
}

func writeID(t *testing.T, file string, id procid.ID) {
	t.Helper()
	data, _ := json.Marshal(id)
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestOwner(t *testing.T) {
	d := Dir(t.TempDir())
	if _, owned, err := d.ReadOwner(); owned || err != nil {
		t.Fatalf("ReadOwner without an owner = %v, %v", owned, err)
	}
	self, _ := procid.Self()
	if err := d.WriteOwner(self); err != nil {
		t.Fatal(err)
	}
	if id, owned, err := d.ReadOwner(); !owned || err != nil || id != self {
		t.Fatalf("ReadOwner = %+v, %v, %v; want %+v", id, owned, err, self)
	}
	_ = os.WriteFile(d.OwnerFile(), []byte("1234"), 0o600)
	if _, _, err := d.ReadOwner(); err == nil || !strings.Contains(err.Error(), "owner.json") {
		t.Fatalf("ReadOwner of garbage = %v, want an error naming the file", err)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	d := Dir(t.TempDir())
	if _, err := d.ReadStatus(); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("ReadStatus without a file = %v", err)
	}
	in := &Status{Phase: PhaseRunning, ID: procid.ID{PID: 42, StartTime: 7}, Processes: []ProcessStatus{{Role: RoleNode, Node: "a", ID: procid.ID{PID: 43, StartTime: 9}, Running: true}}}
	if err := d.WriteStatus(in); err != nil {
		t.Fatal(err)
	}
	out, err := d.ReadStatus()
	if err != nil || out.Phase != PhaseRunning || out.PID != 42 || out.StartTime != 7 || len(out.Processes) != 1 || out.Processes[0].Node != "a" || out.Processes[0].StartTime != 9 {
		t.Fatalf("ReadStatus = %+v, %v", out, err)
	}
	// Atomic writes leave no temporary files behind.
	entries, _ := os.ReadDir(string(d))
	if len(entries) != 1 || entries[0].Name() != filepath.Base(d.StatusFile()) {
		t.Errorf("state dir holds %v", entries)
	}
}

func TestReadProcessRejectsGarbage(t *testing.T) {
	d := Dir(t.TempDir())
	for _, garbage := range []string{"not a pid", "1234", `{"pid":0}`} {
		_ = os.WriteFile(d.PIDFile(), []byte(garbage), 0o644)
		if _, err := d.ReadProcess(); err == nil {
			t.Errorf("PID file %q accepted", garbage)
		}
	}
}

// TestShortLink: a node's kubelet directory gets a short path that a
// plugin's DRA socket fits under, however deep the state; a path that
// another node or program holds is refused and never removed.
func TestShortLink(t *testing.T) {
	deep := Dir(filepath.Join(t.TempDir(), strings.Repeat("deep/", 20), "lab"))
	nd := deep.Node("node-a")
	if err := nd.Link(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nd.Unlink() })
	sock := filepath.Join(nd.Plugins(), "gpu.example.com", "dra-00000000-0000-0000-0000-000000000000.sock")
	if len(sock) > 107 {
		t.Errorf("the DRA socket %s is %d bytes", sock, len(sock))
	}
	if target, err := os.Readlink(nd.KubeletRoot()); err != nil || target != nd.KubeletDir() {
		t.Errorf("%s → %q, %v; want %s", nd.KubeletRoot(), target, err, nd.KubeletDir())
	}
	if err := nd.Link(); err != nil {
		t.Errorf("linking again: %v", err)
	}
	if err := nd.Unlink(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(nd.ShortLink()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the short link remains after Unlink: %v", err)
	}

	// Somebody else's file at the short path.
	other := t.TempDir()
	if err := os.Symlink(other, nd.ShortLink()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(nd.ShortLink()) })
	if err := nd.Link(); !errors.Is(err, ErrLinkTaken) || !strings.Contains(err.Error(), nd.ShortLink()) {
		t.Errorf("Link over another's link = %v, want ErrLinkTaken naming it", err)
	}
	if err := nd.Unlink(); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(nd.ShortLink()); err != nil || target != other {
		t.Errorf("Unlink touched another's link: %q, %v", target, err)
	}
}

func TestLabOf(t *testing.T) {
	dir := Dir(filepath.Join(t.TempDir(), "mylab"))
	if err := os.MkdirAll(string(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	const server = "https://127.0.0.1:40001"
	if err := os.WriteFile(dir.Kubeconfig(), []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := LabOf(dir.Kubeconfig(), server); ok {
		t.Error("a directory without a status is a lab")
	}
	if err := dir.WriteStatus(&Status{Phase: PhaseRunning, APIServer: server}); err != nil {
		t.Fatal(err)
	}
	if got, ok := LabOf(dir.Kubeconfig(), server); !ok || got != string(dir) {
		t.Errorf("LabOf(the lab's kubeconfig) = %q, %v; want %s", got, ok, dir)
	}
	if _, ok := LabOf(dir.Kubeconfig(), "https://127.0.0.1:40002"); ok {
		t.Error("a kubeconfig at another server than the lab's status names is the lab's")
	}
	copied := filepath.Join(t.TempDir(), "kubeconfig")
	if _, ok := LabOf(copied, server); ok {
		t.Error("a copy of the lab's kubeconfig elsewhere is the lab's")
	}
	other := filepath.Join(string(dir), "other.kubeconfig")
	if _, ok := LabOf(other, server); ok {
		t.Error("another file in the lab's directory is the lab's kubeconfig")
	}

	// A kind lab has no status file: its recorded configuration names
	// the kind backend, and kind wrote the kubeconfig beside it.
	kind := Dir(filepath.Join(t.TempDir(), "kindlab"))
	if err := os.MkdirAll(string(kind), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(kind.Kubeconfig(), []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := LabOf(kind.Kubeconfig(), server); ok {
		t.Error("a kubeconfig in a directory without a status or a recorded configuration is a lab's")
	}
	for backend, want := range map[string]bool{"embedded": false, "kind": true} {
		if err := os.WriteFile(kind.path("config.json"), []byte(`{"name":"kindlab","backend":"`+backend+`"}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, ok := LabOf(kind.Kubeconfig(), server); ok != want || (ok && got != string(kind)) {
			t.Errorf("recorded backend %s without a status: LabOf = %q, %v; want %v", backend, got, ok, want)
		}
	}
}
