//go:build !linux

package realnode

import (
	"fmt"
	"runtime"
)

// unmountDetached: a real node runs on Linux only, so elsewhere it has
// mounted nothing.
func unmountDetached(path string) error {
	return fmt.Errorf("unmounting %s: a real node runs on Linux only, not %s", path, runtime.GOOS)
}
