package nvml

// Sources of an NVML inventory, as the driver's --nvml flag names them.
const (
	// SourceLibrary is the machine's NVML library.
	SourceLibrary = "nvml"
	// MockPrefix precedes a mock server's name, e.g. "mock:dgxh100".
	MockPrefix = "mock:"
)

// MockServers are the go-nvml mock servers the driver can run on instead
// of a real NVML library (--nvml=mock:<name>): the DGX servers of go-nvml's
// mock package, 8 GPUs each; "dgxa100-mig", the DGX A100 with MIG mode
// enabled on every GPU; and "mixed", dralab's server of one model per tier
// (H100, A100, L4). The list lives here, in pure Go, so that the lab
// configuration validates a mock's name without linking the cgo package.
var MockServers = []string{"dgxa100", "dgxa100-mig", "dgxb200", "dgxh100", "dgxh200", "mixed"}
