package labserver

import (
	"slices"
	"testing"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// A real node's containers get real interfaces for their NICs; a hollow
// node runs no container, so its NIC driver attaches nothing.
func TestRealNodesAttachNICInterfaces(t *testing.T) {
	dir := labstate.Dir(t.TempDir())
	nics := &config.NICs{Profile: "cx6dx-100g", Count: 2}
	real := nicDriverArgs(dir, config.Node{Name: "r", Kind: config.NodeReal, NICs: nics}, 0)
	hollow := nicDriverArgs(dir, config.Node{Name: "h", NICs: nics}, 0)
	if !slices.Contains(real, "--attach-interfaces") {
		t.Errorf("the real node's NIC driver runs with %v, without --attach-interfaces", real)
	}
	if slices.Contains(hollow, "--attach-interfaces") {
		t.Errorf("a hollow node's NIC driver runs with %v: --attach-interfaces", hollow)
	}
}
