package lab_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/embedded"
)

// These tests start real embedded labs from the dralab binary
// ($DRALAB_BINARY, else built); `go test -short` leaves them out.

func binary(tb testing.TB) string {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts embedded labs: run without -short")
	}
	bin, err := build.Dralab(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return bin
}

func smallConfig(name string, nodes ...string) *config.Config {
	cfg := &config.Config{APIVersion: config.APIVersion, Kind: config.Kind, Name: name, Backend: config.BackendEmbedded}
	for _, n := range nodes {
		cfg.Nodes = append(cfg.Nodes, config.Node{Name: n, Kind: config.NodeHollow, GPUs: &config.GPUs{Profile: "l4-24gb", Count: 1}})
	}
	return cfg
}

// stateRoot is short: unix socket paths under it must stay below 108 bytes.
func stateRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "dl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func newLab(t *testing.T, root, bin string, cfg *config.Config) *lab.Lab {
	t.Helper()
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root), lab.WithBinary(bin))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Down(context.Background()); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return l
}

// labProcesses returns the PIDs of the lab process and its nodes, and the
// loopback ports they listen on.
func labProcesses(t *testing.T, st *lab.Status) ([]int, []int) {
	t.Helper()
	dir := labstate.Dir(st.StateDir)
	s, err := dir.ReadStatus()
	if err != nil {
		t.Fatal(err)
	}
	pids := []int{s.PID}
	for _, p := range s.Processes {
		pids = append(pids, p.PID)
	}
	return pids, listeningPorts(t, pids)
}

// listeningPorts reads the TCP listeners owned by the given processes from
// /proc, failing on any that is not on loopback.
func listeningPorts(t *testing.T, pids []int) []int {
	t.Helper()
	inodes := map[string]bool{}
	for _, pid := range pids {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err == nil && strings.HasPrefix(link, "socket:[") {
				inodes[strings.TrimSuffix(strings.TrimPrefix(link, "socket:["), "]")] = true
			}
		}
	}
	var ports []int
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !inodes[f[9]] { // 0A: LISTEN
				continue
			}
			host, portHex, _ := strings.Cut(f[1], ":")
			port, _ := strconv.ParseInt(portHex, 16, 32)
			if host != "0100007F" { // 127.0.0.1, little-endian
				t.Errorf("a lab process listens on %s (port %d), not on 127.0.0.1", host, port)
			}
			ports = append(ports, int(port))
		}
	}
	return ports
}

func TestUpReuseDown(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	root := stateRoot(t)
	cfg := smallConfig("t-reuse", "n1", "n2")
	l := newLab(t, root, bin, cfg)

	res, err := l.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.Reused {
		t.Error("a new lab reports Reused")
	}
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != "Running" || len(st.Nodes) != 2 {
		t.Fatalf("status = %s with %d nodes, want Running with 2", st.Phase, len(st.Nodes))
	}
	for _, n := range st.Nodes {
		if n.Ready != "True" || !strings.HasPrefix(n.Process, "running") || !strings.HasPrefix(n.Driver, "running") {
			t.Errorf("node %s: ready %s, process %s, driver %s", n.Name, n.Ready, n.Process, n.Driver)
		}
	}
	info, err := os.Stat(l.Kubeconfig())
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig %s: mode %v, %v; want 0600", l.Kubeconfig(), info.Mode().Perm(), err)
	}
	pids, ports := labProcesses(t, st)
	if len(ports) < 3 { // API server + one kubelet per node
		t.Errorf("lab listens on %v, want the API server and each kubelet", ports)
	}

	// Same configuration: reused, same process.
	res, err = l.Up(ctx)
	if err != nil || !res.Reused {
		t.Fatalf("second Up = %+v, %v; want reuse", res, err)
	}
	if st2, _ := l.Status(ctx); st2.PID != st.PID {
		t.Errorf("reuse restarted the lab: pid %d → %d", st.PID, st2.PID)
	}

	// Another configuration under the same name: explained, lab untouched.
	other := newLab(t, root, bin, smallConfig("t-reuse", "n1"))
	if _, err := other.Up(ctx); !errors.Is(err, embedded.ErrConfigMismatch) || !strings.Contains(err.Error(), "lab:down") {
		t.Errorf("Up with another config = %v, want ErrConfigMismatch telling how to delete the lab", err)
	}
	if st3, _ := l.Status(ctx); st3.Phase != "Running" || st3.PID != st.PID {
		t.Errorf("a refused Up disturbed the running lab: %+v", st3)
	}

	if err := l.Down(ctx); err != nil {
		t.Fatal(err)
	}
	assertGone(t, pids, ports)
	if _, err := os.Stat(st.StateDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state %s remains after Down: %v", st.StateDir, err)
	}
	if st, _ := l.Status(ctx); st.Phase != "Absent" {
		t.Errorf("status after Down = %s", st.Phase)
	}
}

func TestUpExplainsPortInUse(t *testing.T) {
	bin := binary(t)
	l0, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l0.Close()
	cfg := smallConfig("t-port", "n1")
	cfg.APIServerPort = l0.Addr().(*net.TCPAddr).Port
	l := newLab(t, stateRoot(t), bin, cfg)
	_, err = l.Up(context.Background())
	if !errors.Is(err, embedded.ErrPortInUse) || !strings.Contains(err.Error(), strconv.Itoa(cfg.APIServerPort)) {
		t.Fatalf("Up on a taken port = %v, want ErrPortInUse naming the port", err)
	}
}

// A state directory too deep for the nodes' unix sockets is refused before
// anything starts, naming the socket, instead of drivers failing forever.
func TestUpRefusesSocketPathsTooLong(t *testing.T) {
	bin := binary(t)
	root := filepath.Join(stateRoot(t), strings.Repeat("deep/", 12))
	cfg := smallConfig("t-deep", "node-with-a-long-name")
	cfg.Nodes[0].GPUs = &config.GPUs{Profile: "l4-24gb", Count: 1}
	if err := cfg.Complete(); err != nil {
		t.Fatal(err)
	}
	l := newLab(t, root, bin, cfg)
	_, err := l.Up(context.Background())
	if !errors.Is(err, embedded.ErrPathTooLong) || !strings.Contains(err.Error(), "node-with-a-long-name") || !strings.Contains(err.Error(), "-reg.sock") {
		t.Fatalf("Up = %v, want ErrPathTooLong naming the node and socket", err)
	}
	if _, err := os.Stat(root); err == nil {
		if entries, _ := os.ReadDir(root); len(entries) > 0 {
			t.Errorf("Up left state behind in %s: %v", root, entries)
		}
	}
}

func TestUpReplacesStaleState(t *testing.T) {
	bin := binary(t)
	ctx := context.Background()
	root := stateRoot(t)
	cfg := smallConfig("t-stale", "n1")
	l := newLab(t, root, bin, cfg)
	if _, err := l.Up(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := l.Status(ctx)
	// Kill the lab process as a crash or reboot would: its nodes die with it.
	if err := syscall.Kill(st.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for labstate.Alive(st.PID) {
		time.Sleep(20 * time.Millisecond)
	}
	stale, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stale.Phase != "Failed" || !strings.Contains(stale.Message, "stale") {
		t.Errorf("status of a killed lab = %s: %s; want Failed explaining stale state", stale.Phase, stale.Message)
	}
	res, err := l.Up(ctx)
	if err != nil || res.Reused {
		t.Fatalf("Up over stale state = %+v, %v; want a fresh lab", res, err)
	}
	if st2, _ := l.Status(ctx); st2.Phase != "Running" || st2.PID == st.PID {
		t.Errorf("after Up over stale state: %+v", st2)
	}
	if _, err := os.Stat(filepath.Join(st.StateDir, "lab.pid")); err != nil {
		t.Errorf("new lab has no pid file: %v", err)
	}
}

// assertGone fails for every process still running and every port still
// listening.
func assertGone(t *testing.T, pids, ports []int) {
	t.Helper()
	for _, pid := range pids {
		if labstate.Alive(pid) {
			t.Errorf("process %d still runs after Down", pid)
		}
	}
	for _, port := range ports {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), time.Second); err == nil {
			c.Close()
			t.Errorf("port %d still listens after Down", port)
		}
	}
}
