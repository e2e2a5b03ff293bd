//go:build linux

package lab_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/mounts"
)

// TestDownRefusesMountedState: a lab whose state root holds a space and
// lies under a symlink comes up; with a bind mount left under its state,
// Down stops it but deletes nothing, neither the state nor the mount's
// source, and names the mount (by its real path) and how to unmount it;
// once unmounted, Down deletes the state and leaves the source alone.
func TestDownRefusesMountedState(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root; this machine runs the test as uid", os.Geteuid())
	}
	bin := binary(t)
	ctx := context.Background()
	base := stateRoot(t)
	real := filepath.Join(base, "real home")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(base, "home")); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(base, "home", "dra labs")
	l, _, client := upLab(ctx, t, root, bin, smallConfig("t-mounts", "n1"))
	if _, err := client.Discovery().ServerVersion(); err != nil {
		t.Fatalf("the lab under %q does not answer: %v", root, err)
	}
	st, err := l.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	dir := labstate.Dir(st.StateDir)

	src := filepath.Join(base, "source")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "data"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(string(dir), "left mounted")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = syscall.Unmount(target, syscall.MNT_DETACH)
		}
	})
	realTarget := filepath.Join(real, "dra labs", "t-mounts", "left mounted")

	err = l.Down(ctx)
	var busy *mounts.BusyError
	if !errors.As(err, &busy) || !strings.Contains(err.Error(), realTarget) || !strings.Contains(err.Error(), "umount '"+realTarget+"'") {
		t.Fatalf("Down with %s mounted under the state = %v; want a refusal naming the mount and how to unmount it", realTarget, err)
	}
	for _, f := range []string{dir.Config(), dir.Kubeconfig(), dir.StatusFile(), filepath.Join(src, "data"), filepath.Join(target, "data")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("a refused Down deleted %s: %v", f, err)
		}
	}

	if err := syscall.Unmount(target, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if err := l.Down(ctx); err != nil {
		t.Fatalf("Down with nothing mounted: %v", err)
	}
	if _, err := os.Stat(string(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state %s is still there after Down: %v", dir, err)
	}
	if data, err := os.ReadFile(filepath.Join(src, "data")); err != nil || string(data) != "keep" {
		t.Errorf("the mount's source lost its file: %q, %v", data, err)
	}
}
