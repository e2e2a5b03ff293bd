package lab_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
)

// A kind lab runs its backend in dralab-kind, which the lab builds: on a
// machine without a container engine its answers cross the process
// boundary as they would in one process (Up fails with lab.ErrNoEngine,
// Status says the lab is absent and why). Where an engine runs, the e2e
// suite's TestKindLab brings a kind lab up.
func TestKindLabThroughItsProgram(t *testing.T) {
	if exec.Command("docker", "info").Run() == nil {
		t.Skip("a container engine answers here: TestKindLab (e2e) brings the kind lab up instead")
	}
	cfg := smallConfig("kind-probe", "n1")
	cfg.Backend = config.BackendKind
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Backend != config.BackendKind || st.Phase != status.PhaseAbsent || !strings.Contains(st.Message, "embedded backend") {
		t.Errorf("status of a kind lab without an engine: %+v", st)
	}
	_, err = l.Up(ctx)
	if !errors.Is(err, lab.ErrNoEngine) {
		t.Fatalf("Up without an engine: %v, want lab.ErrNoEngine", err)
	}
	t.Logf("as expected: %v", err)
}
