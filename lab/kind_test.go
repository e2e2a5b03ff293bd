package lab_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/status"
)

// A kind lab runs its backend in dralab-kind, which the lab builds: where
// no container engine answers — here the one $KIND_EXPERIMENTAL_PROVIDER
// names, a nerdctl whose daemon is down — its answers cross the process
// boundary as they would in one process (Up fails with lab.ErrNoEngine,
// Status says the lab is absent and why). The e2e suite's TestKindLab
// brings a kind lab up on an engine that answers.
func TestKindLabThroughItsProgram(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "nerdctl"), []byte("#!/bin/sh\necho 'cannot access containerd socket' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("KIND_EXPERIMENTAL_PROVIDER", "nerdctl")
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
	if st.Backend != config.BackendKind || st.Phase != status.PhaseAbsent || !strings.Contains(st.Message, "embedded backend") || !strings.Contains(st.Message, "cannot access containerd socket") {
		t.Errorf("status of a kind lab without an engine: %+v", st)
	}
	_, err = l.Up(ctx)
	if !errors.Is(err, lab.ErrNoEngine) {
		t.Fatalf("Up without an engine: %v, want lab.ErrNoEngine", err)
	}
	t.Logf("as expected: %v", err)
}
