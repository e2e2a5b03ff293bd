//go:build linux

package mounts

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestRemoveAllRefusesMounted: a directory whose path holds a space and
// is reached through a symlink, with a bind mount inside it, is neither
// deleted nor emptied, and the mount's source keeps its files; the error
// names the mount (by its real path) and how to unmount it. Once
// unmounted, the directory is deleted and the source is untouched.
func TestRemoveAllRefusesMounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("bind mounts need root; this machine runs the test as uid", os.Geteuid())
	}
	base := t.TempDir()
	real := filepath.Join(base, "home dir")
	src := filepath.Join(base, "source")
	for _, d := range []string{filepath.Join(real, "lab", "node", "vol"), src} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "data"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "lab", "lab.pid"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, "home")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(link, "lab")
	target := filepath.Join(real, "lab", "node", "vol")
	if err := syscall.Mount(src, target, "", syscall.MS_BIND, ""); err != nil {
		t.Fatalf("bind mount: %v", err)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			_ = syscall.Unmount(target, syscall.MNT_DETACH)
		}
	})

	got, err := Under(state)
	if err != nil || len(got) != 1 || got[0] != target {
		t.Fatalf("Under(%q) = %q, %v; want [%q]", state, got, err, target)
	}
	err = RemoveAll(state)
	var busy *BusyError
	if !errors.As(err, &busy) || len(busy.Mounts) != 1 || busy.Mounts[0] != target {
		t.Fatalf("RemoveAll of a directory with a mount under it = %v; want a BusyError naming %s", err, target)
	}
	if !strings.Contains(err.Error(), "umount '"+target+"'") {
		t.Errorf("error %q does not say how to unmount %s", err, target)
	}
	for _, f := range []string{filepath.Join(state, "lab.pid"), filepath.Join(src, "data"), filepath.Join(target, "data")} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("after a refused RemoveAll, %s is gone: %v", f, err)
		}
	}

	if err := syscall.Unmount(target, 0); err != nil {
		t.Fatal(err)
	}
	mounted = false
	if err := RemoveAll(state); err != nil {
		t.Fatalf("RemoveAll with nothing mounted: %v", err)
	}
	if _, err := os.Stat(filepath.Join(real, "lab")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory is still there: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(src, "data")); err != nil || string(data) != "keep" {
		t.Errorf("the mount's source lost its file: %q, %v", data, err)
	}
	if err := RemoveAll(state); err != nil {
		t.Errorf("RemoveAll of a directory that is gone: %v", err)
	}
}
