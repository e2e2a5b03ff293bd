// Package nvmllib lists GPUs through NVML, the NVIDIA Management Library,
// or through go-nvml's mock servers. It is the only cgo package of the
// GPU driver: go-nvml needs cgo even for its mocks. A binary built without
// cgo gets an Open that says so.
//
// NVML is loaded at run time. On a machine without the NVIDIA driver,
// Init fails with ERROR_LIBRARY_NOT_FOUND, and any further call into the
// library (Shutdown and ErrorString included) kills the process with a
// symbol lookup error: after a failed Init this package calls nothing, and
// it writes NVML's return codes as text itself.
package nvmllib

import (
	"errors"

	dnvml "github.com/dralab/dralab/drivers/nvml"
)

// ErrLibraryNotFound means the machine has no NVML library.
var ErrLibraryNotFound = errors.New("NVML library not found: is the NVIDIA driver installed?")

// ErrNoCgo means the binary was built without cgo, which NVML needs.
var ErrNoCgo = errors.New("this binary was built without cgo (CGO_ENABLED=0), and NVML, its mock servers included, needs a cgo build")

// ErrUnknownSource means Open was given a source it does not know.
var ErrUnknownSource = dnvml.ErrUnknownSource

// Sources lists what Open accepts, for flag help and error messages.
func Sources() []string { return dnvml.Sources() }

// Option configures Open.
type Option func(*options)

type options struct {
	node    string
	library string
}

// WithLibraryPath opens the NVML library at path instead of the one the
// loader finds (a driver root's); "" leaves the loader's. A mock server
// ignores it.
func WithLibraryPath(path string) Option {
	return func(o *options) { o.library = path }
}

// WithNode names the node the GPUs belong to. A mock server derives its
// GPUs' UUIDs from it, so that they stay the same when the driver restarts
// and differ from the next node's.
func WithNode(name string) Option {
	return func(o *options) { o.node = name }
}
