package kindcmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/backend"
	"github.com/dralab/dralab/lab/status"
)

// The test binary is dralab-kind too: with envServe set it serves
// fakeBackend, whose state is a directory (envState), so that what the
// child did can be checked.
const (
	envServe = "KINDCMD_TEST_SERVE"
	envState = "KINDCMD_TEST_STATE"
)

func TestMain(m *testing.M) {
	if os.Getenv(envServe) != "" {
		ctx, _ := signal.NotifyContext(context.Background(), os.Interrupt)
		os.Exit(Serve(ctx, func(root string) Backend { return &fakeBackend{root: root, state: os.Getenv(envState)} },
			os.Args[1:], os.Stdin, os.Stdout))
	}
	os.Exit(m.Run())
}

// fakeBackend stands for kind in the child: Up reports two steps and
// records the configuration it got; a lab named "absent" has no engine; a
// lab named "slow" waits in its step until it is interrupted.
type fakeBackend struct {
	root, state string
}

func (f *fakeBackend) Name() string                       { return config.BackendKind }
func (f *fakeBackend) Capabilities() backend.Capabilities { return Capabilities }
func (f *fakeBackend) Kubeconfig(name string) string      { return Kubeconfig(f.root, name) }

func (f *fakeBackend) Up(ctx context.Context, cfg *config.Config, progress ui.Progress) (status.UpResult, error) {
	if cfg.Name == "absent" {
		return status.UpResult{}, fmt.Errorf("%w: no docker here", status.ErrNoEngine)
	}
	done := progress("Creating kind cluster " + cfg.Name)
	if cfg.Name == "slow" {
		select {
		case <-ctx.Done():
			done(ctx.Err())
			return status.UpResult{}, fmt.Errorf("creating kind cluster slow: %w", ctx.Err())
		case <-time.After(time.Minute):
			done(errors.New("not interrupted"))
			return status.UpResult{}, nil
		}
	}
	done(nil)
	done = progress("Installing the driver chart")
	done(errors.New("chart refused"))
	return status.UpResult{Reused: true}, os.WriteFile(filepath.Join(f.state, "up"), []byte(fmt.Sprintf("%s %d", cfg.Name, len(cfg.Nodes))), 0o600)
}

func (f *fakeBackend) Down(ctx context.Context, name string) error {
	return os.WriteFile(filepath.Join(f.state, "down"), []byte(name), 0o600)
}

func (f *fakeBackend) Status(ctx context.Context, name string) (*status.Status, error) {
	return &status.Status{Name: name, Backend: config.BackendKind, Phase: status.PhaseRunning, Kubeconfig: f.Kubeconfig(name),
		Nodes: []status.NodeStatus{{Name: "n1", Ready: "True", Healthy: true}}}, nil
}

func (f *fakeBackend) CollectLogs(ctx context.Context, name, dir string) error {
	return os.WriteFile(filepath.Join(dir, name+".log"), []byte("logs"), 0o600)
}

func (f *fakeBackend) ReadGPUFaults(ctx context.Context, name, node string) ([]byte, string, error) {
	data, err := os.ReadFile(filepath.Join(f.state, node+".faults"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, node + ":faults", nil
	}
	return data, node + ":faults", err
}

func (f *fakeBackend) WriteGPUFaults(ctx context.Context, name, node string, data []byte) error {
	if data == nil {
		return os.Remove(filepath.Join(f.state, node+".faults"))
	}
	return os.WriteFile(filepath.Join(f.state, node+".faults"), data, 0o600)
}

func (f *fakeBackend) NodeImage(ctx context.Context, progress ui.Progress) (NodeImage, error) {
	done := progress("Building the node image")
	done(nil)
	return NodeImage{Name: "dralab.dev/kind-node:v1.37.2-0123456789ab", Archive: "/cache/kind-node.tar", Size: 42, Engine: "podman"}, nil
}

// steps records the progress a Client shows.
type steps struct {
	mu    sync.Mutex
	lines []string
}

func (s *steps) progress(step string) func(error) {
	s.mu.Lock()
	s.lines = append(s.lines, "begin "+step)
	s.mu.Unlock()
	return func(err error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.lines = append(s.lines, fmt.Sprintf("end %s: %v", step, err))
	}
}

func client(t *testing.T) (*Client, string) {
	t.Helper()
	state := t.TempDir()
	t.Setenv(envServe, "1")
	t.Setenv(envState, state)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return New(t.TempDir(), func(context.Context) (string, error) { return self, nil }), state
}

func TestClientRunsTheBackendInItsProgram(t *testing.T) {
	c, state := client(t)
	ctx := context.Background()
	cfg := config.Default()
	cfg.Name = "workshop"
	var s steps
	r, err := c.Up(ctx, cfg, s.progress)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Reused {
		t.Errorf("Up's result lost on the way: %+v", r)
	}
	want := []string{"begin Creating kind cluster workshop", "end Creating kind cluster workshop: <nil>",
		"begin Installing the driver chart", "end Installing the driver chart: chart refused"}
	if strings.Join(s.lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("progress shown:\n%s\nwant:\n%s", strings.Join(s.lines, "\n"), strings.Join(want, "\n"))
	}
	if got, _ := os.ReadFile(filepath.Join(state, "up")); string(got) != fmt.Sprintf("workshop %d", len(cfg.Nodes)) {
		t.Errorf("the program got the configuration %q, want the lab's name and its %d nodes", got, len(cfg.Nodes))
	}

	st, err := c.Status(ctx, "workshop")
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != status.PhaseRunning || len(st.Nodes) != 1 || !st.Nodes[0].Healthy || st.Kubeconfig != c.Kubeconfig("workshop") {
		t.Errorf("status: %+v", st)
	}

	dir := t.TempDir()
	if err := c.CollectLogs(ctx, "workshop", dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "workshop.log")); err != nil {
		t.Errorf("logs not collected into %s: %v", dir, err)
	}

	// Faults: read in the program, changed here, written back.
	fail := func(f map[string]gpu.GPUFault) { f["gpu-0"] = gpu.GPUFault{XID: 79} }
	if err := c.UpdateGPUFaults(ctx, "workshop", "n1", fail); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(state, "n1.faults"))
	if err != nil || !strings.Contains(string(data), `"xid": 79`) && !strings.Contains(string(data), `"xid":79`) {
		t.Fatalf("faults file after a failure: %q, %v", data, err)
	}
	if err := c.UpdateGPUFaults(ctx, "workshop", "n1", func(f map[string]gpu.GPUFault) { delete(f, "gpu-0") }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(state, "n1.faults")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("healing the last GPU left the faults file: %v", err)
	}

	if err := c.Down(ctx, "workshop"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(state, "down")); string(got) != "workshop" {
		t.Errorf("down reached the program as %q", got)
	}
}

// A caller tells the conditions apart as it did in one process: no
// engine is lab.ErrNoEngine, whatever the program's message.
func TestErrorsKeepTheirConditions(t *testing.T) {
	c, _ := client(t)
	cfg := config.Default()
	cfg.Name = "absent"
	_, err := c.Up(context.Background(), cfg, ui.NoProgress)
	if !errors.Is(err, status.ErrNoEngine) || !strings.Contains(err.Error(), "no docker here") {
		t.Fatalf("Up without an engine: %v, want status.ErrNoEngine with the program's message", err)
	}
	if errors.Is(err, status.ErrPortInUse) {
		t.Errorf("%v is also ErrPortInUse", err)
	}
	// A program that fails without saying why is named, with its output.
	bad := New(t.TempDir(), func(context.Context) (string, error) { return "/bin/false", nil })
	if _, err := bad.Status(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "dralab-kind status") {
		t.Errorf("a program that printed nothing: %v", err)
	}
	// A request it cannot read is refused, not half-run.
	if code := Serve(context.Background(), nil, []string{"up"}, strings.NewReader(""), &strings.Builder{}); code != 2 {
		t.Errorf("Serve without a state root: exit %d, want 2", code)
	}
	var out strings.Builder
	if code := Serve(context.Background(), func(string) Backend { return &fakeBackend{} }, []string{"up", "/r"}, strings.NewReader("nodes: [{name: n1, bogus: 1}]"), &out); code != 2 || !strings.Contains(out.String(), "bogus") {
		t.Errorf("Serve with an unknown field: exit %d, %s", code, out.String())
	}
}

// An interrupted caller interrupts the program, which ends its step
// itself (kind deletes a half-created cluster) rather than being killed.
func TestCancelInterruptsTheProgram(t *testing.T) {
	c, _ := client(t)
	cfg := config.Default()
	cfg.Name = "slow"
	ctx, cancel := context.WithCancel(context.Background())
	var s steps
	go func() {
		for {
			s.mu.Lock()
			n := len(s.lines)
			s.mu.Unlock()
			if n > 0 {
				cancel()
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	start := time.Now()
	_, err := c.Up(ctx, cfg, s.progress)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Up interrupted: %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("Up returned %v after it was interrupted", d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.lines) != 2 || s.lines[1] != "end Creating kind cluster slow: context canceled" {
		t.Errorf("the interrupted step was not ended: %q", s.lines)
	}
}

// NodeImage's steps and result cross from dralab-kind to the caller.
func TestClientBuildsTheNodeImageInItsProgram(t *testing.T) {
	c, _ := client(t)
	var s steps
	img, err := c.NodeImage(context.Background(), s.progress)
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != "dralab.dev/kind-node:v1.37.2-0123456789ab" || img.Size != 42 || img.Engine != "podman" {
		t.Errorf("the node image's result lost on the way: %+v", img)
	}
	if want := []string{"begin Building the node image", "end Building the node image: <nil>"}; !slices.Equal(s.lines, want) {
		t.Errorf("steps %q, want %q", s.lines, want)
	}
}
