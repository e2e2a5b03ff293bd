package embedded

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
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
	if !errors.Is(err, status.ErrPathTooLong) || !strings.Contains(err.Error(), "/dra-uuuu") || !strings.Contains(err.Error(), "driver name") {
		t.Fatalf("checkSocketPaths with a %d-byte driver name = %v; want status.ErrPathTooLong naming the DRA socket and the driver name", len(name)+1, err)
	}
}

// TestResumable: only the state of a lab that had come up with the same
// configuration, whose etcd data is there and whose owner (if any) still
// runs, is resumed; any other stale state is replaced.
func TestResumable(t *testing.T) {
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Name: "lab", Nodes: []config.Node{{Name: "n1"}}}
	other := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Name: "lab", Nodes: []config.Node{{Name: "n2"}}}
	for _, c := range []*config.Config{cfg, other} {
		if err := c.Complete(); err != nil {
			t.Fatal(err)
		}
	}
	self, err := procid.Self()
	if err != nil {
		t.Fatal(err)
	}
	ended := self
	ended.StartTime-- // this PID, started at another time: a process that has ended
	for _, tc := range []struct {
		name    string
		phase   string
		noEtcd  bool
		owner   *procid.ID
		backend int
		want    string
	}{
		{name: "came up", phase: labstate.PhaseRunning},
		{name: "owned by this process", phase: labstate.PhaseRunning, owner: &self, backend: self.PID},
		{name: "failed to start", phase: labstate.PhaseFailed, want: "last status is Failed"},
		{name: "was stopping", phase: labstate.PhaseStopping, want: "last status is Stopping"},
		{name: "no etcd data", phase: labstate.PhaseRunning, noEtcd: true, want: "no etcd data"},
		{name: "owner ended", phase: labstate.PhaseRunning, owner: &ended, backend: self.PID, want: "has ended"},
		{name: "another owner", phase: labstate.PhaseRunning, owner: &self, want: "belongs to"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := New(t.TempDir(), noBinary).OwnedBy(tc.backend)
			dir := b.dir("lab")
			if err := os.MkdirAll(string(dir), 0o700); err != nil {
				t.Fatal(err)
			}
			if !tc.noEtcd {
				if err := os.MkdirAll(dir.Etcd(), 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if tc.owner != nil {
				if err := dir.WriteOwner(*tc.owner); err != nil {
					t.Fatal(err)
				}
			}
			if err := dir.WriteStatus(&labstate.Status{Phase: tc.phase, ConfigHash: cfg.Hash()}); err != nil {
				t.Fatal(err)
			}
			got := b.resumable(dir, cfg)
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("resumable = %q, want %q", got, tc.want)
			}
			if tc.want == "" {
				if why := b.resumable(dir, other); !strings.Contains(why, "another configuration") {
					t.Errorf("resumable with another configuration = %q, want it refused", why)
				}
			}
		})
	}
}

// TestUpExplainsDegradedLab: Up on a running lab one of whose processes
// has ended (and not yet been started again) says which, and how to
// recreate the lab, instead of reusing it.
func TestUpExplainsDegradedLab(t *testing.T) {
	labProc, node := stranger(t), stranger(t)
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Name: "degraded", Nodes: []config.Node{{Name: "n1"}}}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	b := New(t.TempDir(), noBinary)
	dir := b.dir("degraded")
	if err := os.MkdirAll(string(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Record(dir.Config()); err != nil {
		t.Fatal(err)
	}
	pidFile, _ := json.Marshal(labProc)
	if err := os.WriteFile(dir.PIDFile(), pidFile, 0o644); err != nil {
		t.Fatal(err)
	}
	st := &labstate.Status{Phase: labstate.PhaseRunning, ID: labProc, ConfigHash: cfg.Hash(), Processes: []labstate.ProcessStatus{
		{Role: labstate.RoleNode, Node: "n1", ID: node, Exit: "signal: killed"},
	}}
	if err := dir.WriteStatus(st); err != nil {
		t.Fatal(err)
	}
	_, err := b.Up(context.Background(), cfg, ui.NoProgress)
	if !errors.Is(err, status.ErrDegraded) || !strings.Contains(err.Error(), "node n1: exited: signal: killed") || !strings.Contains(err.Error(), "lab:down") {
		t.Errorf("Up on a degraded lab = %v; want status.ErrDegraded naming the node and how to recreate the lab", err)
	}
}

// TestReuseWaitsForTokensKept: a reused lab whose drivers' tokens a sleep
// left overdue is handed out once the lab process has renewed them, and
// one whose tokens stay overdue is an error naming the file.
func TestReuseWaitsForTokensKept(t *testing.T) {
	cfg := config.Default()
	dir := labstate.Dir(t.TempDir())
	token := func(issued time.Time) []byte {
		claims := fmt.Sprintf(`{"iat":%d,"exp":%d}`, issued.Unix(), issued.Add(driverauth.TokenLifetime).Unix())
		return []byte("e30." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".sig")
	}
	node := dir.Node(cfg.Nodes[0].Name)
	if err := os.MkdirAll(string(node), 0o700); err != nil {
		t.Fatal(err)
	}
	// Issued 70 min ago: the machine slept through its renewal.
	stale := token(time.Now().Add(-70 * time.Minute))
	if err := os.WriteFile(node.Driver(labstate.RoleDriver).Token, stale, 0o600); err != nil {
		t.Fatal(err)
	}
	err := waitTokensKept(context.Background(), dir, cfg, time.Second)
	if err == nil || !strings.Contains(err.Error(), node.Driver(labstate.RoleDriver).Token) {
		t.Fatalf("waitTokensKept with a token 70 min old = %v; want an error naming %s", err, node.Driver(labstate.RoleDriver).Token)
	}
	// The lab process renews it while lab:up waits.
	go func() {
		time.Sleep(500 * time.Millisecond)
		if err := atomicfile.Write(node.Driver(labstate.RoleDriver).Token, token(time.Now()), 0o600); err != nil {
			t.Error(err)
		}
	}()
	if err := waitTokensKept(context.Background(), dir, cfg, 10*time.Second); err != nil {
		t.Fatalf("waitTokensKept with the token renewed after 0.5 s: %v", err)
	}
}
