//go:build !cgo

package nvmllib

import (
	"fmt"

	dnvml "github.com/dralab/dralab/drivers/nvml"
)

// Open fails: NVML and its mocks need cgo, which this binary was built
// without.
func Open(source string, _ ...Option) (dnvml.Lister, error) {
	return nil, fmt.Errorf("GPU source %q: %w", source, ErrNoCgo)
}
