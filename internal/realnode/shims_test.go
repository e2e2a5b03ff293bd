//go:build linux

package realnode

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// A copy of the test binary named like a shim runs as one: with
// DRALAB_TEST_SHIM set, TestShimHelper only sleeps.
const envShimHelper = "DRALAB_TEST_SHIM"

func TestShimHelper(t *testing.T) {
	if os.Getenv(envShimHelper) == "" {
		return
	}
	time.Sleep(time.Minute)
}

// TestShims: the shims of a node are the processes named containerd-shim*
// whose -address is exactly the node's containerd socket; a shim of
// another containerd (a socket path that merely starts the same way) and a
// process of another name that mentions the socket are not.
func TestShims(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	shim, other := filepath.Join(dir, "containerd-shim-runc-v2"), filepath.Join(dir, "not-a-shim")
	for _, f := range []string{shim, other} {
		if err := os.WriteFile(f, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	socket := filepath.Join(dir, "node", "containerd.sock")
	start := func(bin string, args ...string) int {
		cmd := exec.Command(bin, append([]string{"-test.run=^TestShimHelper$", "--"}, args...)...)
		cmd.Env = append(os.Environ(), envShimHelper+"=1")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
		return cmd.Process.Pid
	}
	mine := start(shim, "-namespace", "k8s.io", "-address", socket)
	start(shim, "-namespace", "k8s.io", "-address", socket+"-other")
	start(other, "-address", socket)

	var got []int
	_ = wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		got = nil
		for _, id := range Shims(socket) {
			got = append(got, id.PID)
		}
		return len(got) > 0, nil
	})
	if !slices.Equal(got, []int{mine}) {
		t.Fatalf("Shims(%s) = %v, want the one shim of that socket, %d", socket, got, mine)
	}
}
