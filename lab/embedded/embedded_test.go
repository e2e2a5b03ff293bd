package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/lab/config"
)

func noBinary(context.Context) (string, error) { return "", errors.New("no binary in this test") }

// stranger starts a process that is not the lab's, with the command-line
// words a lab process has ("serve", "node").
func stranger(t *testing.T) procid.ID {
	t.Helper()
	cmd := exec.Command("sh", "-c", "sleep 600", "serve", "node")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	id, err := procid.Of(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestDownNeverSignalsAReusedPID: a lab's recorded processes whose PIDs now
// belong to other programs (another start time: a reboot or a PID wrap)
// are neither signalled nor counted as running, and Down still removes
// the state.
func TestDownNeverSignalsAReusedPID(t *testing.T) {
	lab, node := stranger(t), stranger(t)
	recorded := func(id procid.ID) procid.ID {
		id.StartTime-- // the lab's process started earlier, and has ended
		return id
	}
	b := New(t.TempDir(), noBinary)
	dir := b.dir("reused")
	if err := os.MkdirAll(string(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	pidFile, _ := json.Marshal(recorded(lab))
	if err := os.WriteFile(dir.PIDFile(), pidFile, 0o644); err != nil {
		t.Fatal(err)
	}
	status := &labstate.Status{Phase: labstate.PhaseRunning, ID: recorded(lab), Processes: []labstate.ProcessStatus{
		{Role: labstate.RoleNode, Node: "n1", ID: recorded(node), Running: true},
	}}
	if err := dir.WriteStatus(status); err != nil {
		t.Fatal(err)
	}

	st, err := b.Status(context.Background(), "reused")
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != "Failed" {
		t.Errorf("status of a lab whose PID was reused = %s, want Failed (not running)", st.Phase)
	}
	if err := b.Down(context.Background(), "reused"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []procid.ID{lab, node} {
		if err := syscall.Kill(id.PID, 0); err != nil || !id.Alive() {
			t.Errorf("Down signalled %s, which only has a PID the lab once recorded", id)
		}
	}
	if _, err := os.Stat(string(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Down left the state %s: %v", dir, err)
	}
	if _, err := os.Stat(filepath.Dir(string(dir))); err != nil {
		t.Errorf("Down removed the state root: %v", err)
	}
}

// TestSocketPathsIncludeRollingUpdateNames: however deep the state
// directory, the nodes' plugin sockets fit, since the kubelet's directory
// is a short link; a driver name so long that the DRA socket a
// rolling-update-capable plugin names with its pod UID
// (<plugins>/<driver>/dra-<uid>.sock) would not fit is refused, naming it.
func TestSocketPathsIncludeRollingUpdateNames(t *testing.T) {
	deep := labstate.Dir(filepath.Join(t.TempDir(), strings.Repeat("deep/", 30), "lab"))
	cfg := func(driver string) *config.Config {
		return &config.Config{Name: "lab", Nodes: []config.Node{{Name: "node-with-a-long-name"}}, Driver: &config.Driver{Name: driver}}
	}
	if err := checkSocketPaths(deep, cfg("gpu.example.com")); err != nil {
		t.Errorf("a deep state directory: %v", err)
	}
	nd := deep.Node("node-with-a-long-name")
	// The longest driver name whose DRA socket still fits, and one more.
	fits := maxSocketPath - len(filepath.Join(nd.Plugins(), "", "dra-"+strings.Repeat("u", podUIDLength)+".sock")) - 1
	name := strings.Repeat("d", fits-len(".example.com")) + ".example.com"
	if err := checkSocketPaths(deep, cfg(name)); err != nil {
		t.Errorf("a %d-byte driver name: %v", len(name), err)
	}
	err := checkSocketPaths(deep, cfg("d"+name))
	if !errors.Is(err, ErrPathTooLong) || !strings.Contains(err.Error(), "/dra-uuuu") || !strings.Contains(err.Error(), "driver name") {
		t.Fatalf("checkSocketPaths with a %d-byte driver name = %v; want ErrPathTooLong naming the DRA socket and the driver name", len(name)+1, err)
	}
}
