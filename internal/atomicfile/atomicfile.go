// Package atomicfile replaces files atomically: readers see the old content
// or the new, never a torn write, and a crash leaves one of the two. It is
// renameio's write with the directory made first and synced after, for
// what the lab keeps (its configuration, state and credentials); the
// driver kit, which imports nothing of the lab's, has the same as
// kit.WriteFileAtomically.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/renameio/v2"
)

// Write creates path's directory, writes data to a temporary file beside
// path, syncs it, renames it over path (mode perm, the umask aside) and
// syncs the directory, so the rename is durable.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := renameio.WriteFile(path, data, perm, renameio.WithStaticPermissions(perm)); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
