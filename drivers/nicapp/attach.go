package nicapp

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
)

// HookArg is the first argument of the NIC driver's createRuntime hook,
// after the program: `dralab-driver nic attach --interface … --address …
// --hardware-address …`, with the container's OCI state on stdin.
const HookArg = "attach"

// Attachment is the interface a container gets: its name, address (with
// its prefix length) and hardware address, as the claim's network data
// names them.
type Attachment struct {
	Interface, Address, HardwareAddress string
}

// validate says what is wrong with an attachment before anything is
// created.
func (a Attachment) validate() error {
	if a.Interface == "" || len(a.Interface) > 15 {
		return fmt.Errorf("--interface %q: want a Linux interface name of 1 to 15 characters", a.Interface)
	}
	if _, err := netip.ParsePrefix(a.Address); err != nil {
		return fmt.Errorf("--address %q: want an address with its prefix length: %w", a.Address, err)
	}
	if _, err := net.ParseMAC(a.HardwareAddress); err != nil {
		return fmt.Errorf("--hardware-address %q: %w", a.HardwareAddress, err)
	}
	return nil
}

// containerState is what the runtime gives a hook on stdin: the OCI state
// of the container, whose process's network namespace is its pod's.
type containerState struct {
	ID  string `json:"id"`
	Pid int    `json:"pid"`
}

func readState(r io.Reader) (containerState, error) {
	var st containerState
	if err := json.NewDecoder(r).Decode(&st); err != nil {
		return st, fmt.Errorf("reading the container's OCI state from stdin: %w", err)
	}
	if st.Pid <= 0 || st.ID == "" {
		return st, fmt.Errorf("the container's OCI state has id %q and pid %d: want both (run as a createRuntime hook)", st.ID, st.Pid)
	}
	return st, nil
}

// HostVethPrefix begins the name of the host end of every veth pair the
// hook creates, so that what the lab made can be told from the host's own
// interfaces: dlnic<10 hex digits> (15 characters, Linux's limit).
const HostVethPrefix = "dlnic"

// vethNames are the host end's name and the temporary name of the end
// that moves into the container, from the container and interface: a
// pod's second container finds the interface there already.
func vethNames(container, iface string) (host, peer string) {
	sum := sha256.Sum256([]byte(container + "/" + iface))
	h := hex.EncodeToString(sum[:5])
	return HostVethPrefix + h, "dlpeer" + h[:9]
}
