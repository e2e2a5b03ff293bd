// Package mounts reads the host's mount table, so that the lab deletes a
// directory only when nothing is mounted under it: os.RemoveAll descends
// into bind mounts and would delete their sources.
package mounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/moby/sys/mountinfo"
)

// Under lists the mount points at or below dir, deepest first. dir is made
// absolute and its symlinks are resolved first, since the kernel lists
// mount points by their real paths; the mount table's escapes (\040 for a
// space) are decoded by its parser. A dir that does not exist has no
// mounts.
func Under(dir string) ([]string, error) {
	real, err := resolve(dir)
	if err != nil || real == "" {
		return nil, err
	}
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(real))
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	out := make([]string, 0, len(infos))
	for _, m := range infos {
		out = append(out, m.Mountpoint)
	}
	sort.SliceStable(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out, nil
}

// resolve returns dir's absolute path with its symlinks resolved, or ""
// when dir does not exist.
func resolve(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("resolving %s: %w", dir, err)
	}
	return real, nil
}

// BusyError says that a directory was not deleted, and nothing in it was,
// because something is mounted under it.
type BusyError struct {
	Dir    string
	Mounts []string
}

func (e *BusyError) Error() string {
	cmds := make([]string, len(e.Mounts))
	for i, m := range e.Mounts {
		cmds[i] = "umount " + quote(m)
	}
	return fmt.Sprintf("not deleting %s, nor anything in it: %s mounted under it (%s); unmount with: %s",
		e.Dir, plural(len(e.Mounts)), strings.Join(e.Mounts, ", "), strings.Join(cmds, " && "))
}

func plural(n int) string {
	if n == 1 {
		return "1 file system is"
	}
	return fmt.Sprintf("%d file systems are", n)
}

// quote quotes a path for a POSIX shell when it needs it.
func quote(p string) string {
	if !strings.ContainsAny(p, " \t\n'\"\\$`*?[]#~;&|<>(){}") {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}

// RemoveAll deletes dir and what it holds, as os.RemoveAll does, but only
// when nothing is mounted at or below it; otherwise it deletes nothing and
// returns a *BusyError naming the mounts. A dir that does not exist is no
// error.
func RemoveAll(dir string) error {
	ms, err := Under(dir)
	if err != nil {
		return fmt.Errorf("not deleting %s: %w", dir, err)
	}
	if len(ms) > 0 {
		return &BusyError{Dir: dir, Mounts: ms}
	}
	return os.RemoveAll(dir)
}
