package build

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dralab/dralab/internal/atomicfile"
)

// Fingerprint identifies, cheaply, what can change between two builds of
// the module that dir (the current directory when empty) is in: the Go toolchain and its settings (go
// env), and the path, size and modification time of every file under the
// module's root (but .git and the scratch directory .cache) and under the
// directories its go.mod replaces modules with. Equal fingerprints mean
// that no file changed, as far as the file system tells. The go command's
// own check that a binary is up to date hashes the content of every
// source file of its packages (over a second for the dralab binary); a
// build records the fingerprint it started from (Record) so that the next
// one, finding it unchanged (Fresh), skips that check. In a workspace
// (go.work) there is no fingerprint.
func Fingerprint(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "env", "-json")
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	var env map[string]string
	if err := json.Unmarshal(out, &env); err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	if w := env["GOWORK"]; w != "" && w != "off" {
		return "", fmt.Errorf("in the workspace %s, a build has no fingerprint", w)
	}
	gomod := env["GOMOD"]
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not in a module: a build has no fingerprint")
	}
	// GOGCCFLAGS names a new temporary directory each time; what it is
	// made of (CC, CGO_CFLAGS, …) is there on its own.
	delete(env, "GOGCCFLAGS")
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(env)) {
		fmt.Fprintf(h, "%s=%s\n", k, env[k])
	}
	root := filepath.Dir(gomod)
	dirs, err := replacedDirs(gomod)
	if err != nil {
		return "", err
	}
	for _, dir := range append([]string{root}, dirs...) {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if name := d.Name(); path != dir && (name == ".git" || name == ".cache") {
					return filepath.SkipDir
				}
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00%d\x00%d\x00%v\n", path, info.Size(), info.ModTime().UnixNano(), info.Mode())
			return nil
		})
		if err != nil {
			return "", fmt.Errorf("fingerprint of %s: %w", dir, err)
		}
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// replacedDirs lists the directories outside the module's root that its
// go.mod replaces modules with.
func replacedDirs(gomod string) ([]string, error) {
	data, err := os.ReadFile(gomod)
	if err != nil {
		return nil, err
	}
	root := filepath.Dir(gomod)
	var dirs []string
	for sc := bufio.NewScanner(bytes.NewReader(data)); sc.Scan(); {
		_, target, ok := strings.Cut(sc.Text(), "=>")
		if !ok {
			continue
		}
		f := strings.Fields(target)
		if len(f) == 0 || !(strings.HasPrefix(f[0], "./") || strings.HasPrefix(f[0], "../") || filepath.IsAbs(f[0])) {
			continue
		}
		dir := f[0]
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(root, dir)
		}
		if rel, err := filepath.Rel(root, dir); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			continue // under the root, walked with it
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// stamp is what Record writes beside a build's outputs: the fingerprint
// it started from, and each output's size and modification time, so that
// a replaced output is not taken for the build's.
func stamp(fingerprint string, outputs []string) (string, error) {
	var b strings.Builder
	b.WriteString(fingerprint + "\n")
	for _, o := range outputs {
		info, err := os.Stat(o)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "%s %d %d\n", o, info.Size(), info.ModTime().UnixNano())
	}
	return b.String(), nil
}

// Record writes, in file, that outputs were built from the tree whose
// Fingerprint, taken before the build started, is fingerprint.
func Record(file, fingerprint string, outputs ...string) error {
	s, err := stamp(fingerprint, outputs)
	if err != nil {
		return err
	}
	return atomicfile.Write(file, []byte(s), 0o644)
}

// Fresh tells whether file records outputs, as they are, built from the
// tree whose fingerprint is fingerprint.
func Fresh(file, fingerprint string, outputs ...string) bool {
	data, err := os.ReadFile(file)
	if err != nil || fingerprint == "" {
		return false
	}
	s, err := stamp(fingerprint, outputs)
	return err == nil && string(data) == s
}
