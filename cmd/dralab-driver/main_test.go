package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Without NVIDIA's library, --inventory=nvml is one clear line and a
// non-zero exit: never the symbol lookup error that any NVML call after a
// failed Init ends with.
func TestNVMLWithoutTheLibrary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the driver: run without -short")
	}
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("this machine has an NVIDIA driver: the NVML inventory starts here (go run mage.go device:check covers it)")
	}
	bin := filepath.Join(t.TempDir(), "dralab-driver")
	build := exec.Command("go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(bin, "--inventory=nvml")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("exit = %v, want status 1; stderr:\n%s", err, stderr.String())
	}
	want := "dralab-driver: NVML library not found: is the NVIDIA driver installed?\n"
	if stderr.String() != want || stdout.Len() != 0 {
		t.Errorf("stderr = %q, stdout = %q; want only %q", stderr.String(), stdout.String(), want)
	}
	for _, crash := range []string{"symbol lookup", "panic", "SIGSEGV"} {
		if strings.Contains(stderr.String(), crash) {
			t.Errorf("the driver crashed: %s", stderr.String())
		}
	}
}
