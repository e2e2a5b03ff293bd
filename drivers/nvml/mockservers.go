package nvml

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Sources of an NVML inventory, as the driver's --nvml flag names them.
const (
	// SourceLibrary is the machine's NVML library.
	SourceLibrary = "nvml"
	// MockPrefix precedes a mock server's name, e.g. "mock:dgxh100".
	MockPrefix = "mock:"
	// SourceHost is how a lab configuration names the machine's library.
	SourceHost = "host"
)

// SourceOf is the --nvml flag for a lab configuration's nvml value: the
// library for SourceHost, the mock server as named otherwise.
func SourceOf(configured string) string {
	if configured == SourceHost {
		return SourceLibrary
	}
	return configured
}

// MockServers are the go-nvml mock servers the driver can run on instead
// of a real NVML library (--nvml=mock:<name>): the DGX servers of go-nvml's
// mock package, 8 GPUs each; "dgxa100-mig", the DGX A100 with MIG mode
// enabled on every GPU; and "mixed", dralab's server of one model per tier
// (H100, A100, L4). The list lives here, in pure Go, so that the lab
// checks a configuration's mock names without linking the cgo package.
var MockServers = []string{"dgxa100", "dgxa100-mig", "dgxb200", "dgxh100", "dgxh200", "mixed"}

// ErrUnknownSource means a source names neither the library nor a mock
// server.
var ErrUnknownSource = errors.New("unknown GPU source")

// Sources lists the sources ParseSource accepts, for flag help and errors.
func Sources() []string {
	out := []string{SourceLibrary}
	for _, s := range MockServers {
		out = append(out, MockPrefix+s)
	}
	return out
}

// Source is where a driver takes its GPUs from: the machine's NVML
// library, or the mock server Mock.
type Source struct {
	// Mock is one of MockServers; empty: the library.
	Mock string
}

// ParseSource parses the driver's --nvml: SourceLibrary (or "") for the
// library, MockPrefix+name for one of MockServers. Anything else is
// ErrUnknownSource, naming the source and the choices.
func ParseSource(source string) (Source, error) {
	if source == "" || source == SourceLibrary {
		return Source{}, nil
	}
	if name, ok := strings.CutPrefix(source, MockPrefix); ok && slices.Contains(MockServers, name) {
		return Source{Mock: name}, nil
	}
	return Source{}, fmt.Errorf("%w %q: want one of %s", ErrUnknownSource, source, strings.Join(Sources(), ", "))
}

// String is the source as --nvml spells it.
func (s Source) String() string {
	if s.Mock == "" {
		return SourceLibrary
	}
	return MockPrefix + s.Mock
}
