package kind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kindexec "sigs.k8s.io/kind/pkg/exec"
	kindlog "sigs.k8s.io/kind/pkg/log"

	"github.com/dralab/dralab/lab/status"
)

// engineCommands puts scripts named after engines on a PATH of their own:
// each prints its lines and exits with its code.
func engineCommands(t *testing.T, scripts map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
}

// A docker command whose daemon does not answer is no engine: podman is
// tried next (kind's own detection stops at the docker command); when no
// engine answers, one error says what each said, the failing command's
// output included; $KIND_EXPERIMENTAL_PROVIDER picks one, as in kind's CLI.
func TestPickEngine(t *testing.T) {
	noDaemon := `echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1`
	podman := `case "$1" in --version) echo "podman version 4.3.1";; ps) echo lab-a; echo lab-a;; esac`

	engineCommands(t, map[string]string{"docker": noDaemon, "podman": podman})
	t.Setenv(EnvProvider, "")
	p, name, clusters, err := pickEngine(kindlog.NoopLogger{})
	if err != nil || p == nil || name != "podman" || strings.Join(clusters, ",") != "lab-a" {
		t.Errorf("with docker's daemon down and podman up: %q, clusters %v, %v; want podman and its cluster lab-a", name, clusters, err)
	}

	engineCommands(t, map[string]string{"docker": noDaemon})
	_, _, _, err = pickEngine(kindlog.NoopLogger{})
	if !errors.Is(err, status.ErrNoEngine) {
		t.Fatalf("no engine answering: %v, want ErrNoEngine", err)
	}
	for _, want := range []string{"docker: failed to list clusters: command \"docker ps", "Cannot connect to the Docker daemon", "podman: not installed", "nerdctl: not installed", "embedded backend"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}

	engineCommands(t, map[string]string{"docker": `exit 0`, "podman": podman})
	t.Setenv(EnvProvider, "podman")
	if _, name, _, err := pickEngine(kindlog.NoopLogger{}); err != nil || name != "podman" {
		t.Errorf("$%s=podman with docker answering too: %q, %v; want podman", EnvProvider, name, err)
	}
	t.Setenv(EnvProvider, "lxd")
	if _, _, _, err := pickEngine(kindlog.NoopLogger{}); !errors.Is(err, status.ErrNoEngine) || !strings.Contains(err.Error(), `"lxd" is no engine kind knows`) {
		t.Errorf("$%s=lxd: %v", EnvProvider, err)
	}
}

// A failed command's output, which kind's own message leaves out, is in
// the error: its last lines.
func TestErrorsKeepTheCommandsOutput(t *testing.T) {
	var out strings.Builder
	for i := range 15 {
		fmt.Fprintf(&out, "line %d\n", i)
	}
	err := fmt.Errorf("creating: %w", &kindexec.RunError{Command: []string{"docker", "run"}, Output: []byte(out.String()), Inner: errors.New("exit status 125")})
	got := withOutput(err).Error()
	if !strings.Contains(got, "line 5 | line 6") || !strings.Contains(got, "line 14") || strings.Contains(got, "line 4 |") {
		t.Errorf("withOutput = %q, want the last 10 lines of the output", got)
	}
	if plain := errors.New("no command"); withOutput(plain) != plain {
		t.Errorf("withOutput changed an error that ran no command")
	}
}

// A lab records the engine its nodes run on, and lab:down and lab:status
// ask that engine alone: where it does not answer, even with another
// engine answering, lab:down removes nothing and says which engine, and
// lab:status says the lab failed; $KIND_EXPERIMENTAL_PROVIDER naming
// another engine is refused. Before, docker answering made lab:down a
// silent no-op on a podman lab's nodes, whose state it then removed.
func TestALabAsksItsOwnEngine(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Dir(engineFile(root, "lab-p")), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(engineFile(root, "lab-p"), []byte("podman\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	engineCommands(t, map[string]string{
		"docker": `exit 0`,
		"podman": `echo "Error: cannot open the podman socket" >&2; exit 125`,
	})
	t.Setenv(EnvProvider, "")
	_, engine, _, err := labEngine(root, "lab-p")
	if err == nil || engine != "podman" || !strings.Contains(err.Error(), "lab lab-p runs on podman, which does not answer") || !strings.Contains(err.Error(), "cannot open the podman socket") {
		t.Fatalf("the lab's engine not answering: %q, %v; want an error naming podman and what it said", engine, err)
	}
	b := New(root)
	if err := b.Down(context.Background(), "lab-p"); err == nil || !strings.Contains(err.Error(), "podman") {
		t.Errorf("lab:down with the lab's engine silent: %v; want a refusal naming podman", err)
	}
	if _, err := os.Stat(engineFile(root, "lab-p")); err != nil {
		t.Errorf("lab:down removed the lab's state though its nodes may run: %v", err)
	}
	st, err := b.Status(context.Background(), "lab-p")
	if err != nil || st.Phase != status.PhaseFailed || !strings.Contains(st.Message, "podman") {
		t.Errorf("lab:status: %+v, %v; want Failed naming podman", st, err)
	}
	t.Setenv(EnvProvider, "docker")
	if _, _, _, err := labEngine(root, "lab-p"); !errors.Is(err, ErrOtherEngine) || !strings.Contains(err.Error(), "runs on podman") {
		t.Errorf("$%s=docker for a podman lab: %v; want ErrOtherEngine", EnvProvider, err)
	}
	// A lab that recorded none (older) takes the first that answers.
	t.Setenv(EnvProvider, "")
	if _, engine, _, err := labEngine(root, "lab-old"); err != nil || engine != "docker" {
		t.Errorf("a lab without a record: %q, %v; want docker, the first that answers", engine, err)
	}
}
