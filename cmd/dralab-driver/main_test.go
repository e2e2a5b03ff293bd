package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Without NVIDIA's library, --inventory=nvml is one clear line and a
// non-zero exit: never the symbol lookup error that any NVML call after a
// failed Init ends with.
func TestNVMLWithoutTheLibrary(t *testing.T) {
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver: the NVML inventory starts here (go run mage.go device:check covers it)")
	}
	stdout, stderr := runFailing(t, nil, "--inventory=nvml")
	want := "dralab-driver: NVML library not found: is the NVIDIA driver installed?\n"
	if stderr != want || stdout != "" {
		t.Errorf("stderr = %q, stdout = %q; want only %q", stderr, stdout, want)
	}
	for _, crash := range []string{"symbol lookup", "panic", "SIGSEGV"} {
		if strings.Contains(stderr, crash) {
			t.Errorf("the driver crashed: %s", stderr)
		}
	}
}

var (
	buildOnce sync.Once
	binary    string
	buildErr  error
)

// driver builds the command once for the tests that run it.
func driver(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the driver: run without -short")
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dralab-driver-test-")
		if err != nil {
			buildErr = err
			return
		}
		binary = filepath.Join(dir, "dralab-driver")
		build := exec.Command("go", "build", "-o", binary, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := build.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binary != "" {
		os.RemoveAll(filepath.Dir(binary))
	}
	os.Exit(code)
}

// runFailing runs the driver with args and the environment variables env,
// and wants it to exit with status 1 within a minute.
func runFailing(t *testing.T, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, driver(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("dralab-driver %s: exit = %v, want status 1; stderr:\n%s", strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), errOut.String()
}

// A health address already taken fails the start, naming the flag, with
// the listener's own words, before the driver registers anywhere.
func TestTakenHealthzAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	addr := l.Addr().String()
	dir := t.TempDir()
	_, stderr := runFailing(t, nil, "--healthz-address="+addr, "--node-name=n", "--profile=h100-80gb", "--gpus=1",
		"--kubelet-registrar-dir="+filepath.Join(dir, "registry"), "--kubelet-plugins-dir="+filepath.Join(dir, "plugins"),
		"--cdi-dir="+filepath.Join(dir, "cdi"), "--checkpoint-dir="+filepath.Join(dir, "state"))
	want := "dralab-driver: --healthz-address (or $DRALAB_HEALTHZ_ADDRESS): listen tcp " + addr + ": bind: address already in use\n"
	if stderr != want {
		t.Errorf("stderr = %q, want %q", stderr, want)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the failed start left %v in its directories", entries)
	}
}

// A pod UID that is not a UUID is one clear error, from the flag or from
// its environment variable.
func TestBadPodUID(t *testing.T) {
	for name, run := range map[string]struct {
		env  []string
		args []string
	}{
		"flag": {args: []string{"--pod-uid=not-a-uid"}},
		"env":  {env: []string{"DRALAB_POD_UID=not-a-uid"}},
	} {
		t.Run(name, func(t *testing.T) {
			stdout, stderr := runFailing(t, run.env, run.args...)
			want := `dralab-driver: --pod-uid (or $DRALAB_POD_UID) "not-a-uid" is not a pod UID: want a UUID`
			if !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 || stdout != "" {
				t.Errorf("stderr = %q, stdout = %q; want one line starting %q", stderr, stdout, want)
			}
		})
	}
}

// --help names each flag with its environment variable, for the GPU
// driver and for the NIC driver (`dralab-driver nic`).
func TestHelpListsFlagsWithEnv(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"nic", "--help"}} {
		var out bytes.Buffer
		cmd := exec.Command(driver(t), args...)
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		for _, flag := range []string{"pod-uid", "healthz-address", "metrics-address", "node-name"} {
			env := "DRALAB_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
			re := regexp.MustCompile(`(?m)^\s+--` + flag + ` .*\[\$` + env + `\]$`)
			if !re.MatchString(out.String()) {
				t.Errorf("%v has no line for --%s ending in [$%s]:\n%s", args, flag, env, out.String())
			}
		}
	}
}
