//go:build !linux

package procid

import (
	"fmt"
	"runtime"
)

// Listeners reads /proc, which only Linux has.
func Listeners([]ID) ([]Listener, error) {
	return nil, fmt.Errorf("listing a process's sockets reads /proc, which %s has not", runtime.GOOS)
}
