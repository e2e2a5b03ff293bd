package nicapp

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Attach puts a in the network namespace of the container whose OCI state
// state holds: one end of a new veth pair, renamed, with its hardware
// address and address, up; the other end stays on the host, named
// HostVethPrefix…, and goes with the pod's network namespace. An
// interface of that name there already (the pod's other container) is
// left as it is. Nothing is left half made: a failure deletes the pair.
func Attach(stdin io.Reader, a Attachment) (err error) {
	if err := a.validate(); err != nil {
		return err
	}
	st, err := readState(stdin)
	if err != nil {
		return err
	}
	ns, err := netns.GetFromPid(st.Pid)
	if err != nil {
		return fmt.Errorf("the network namespace of container %s (pid %d): %w", st.ID, st.Pid, err)
	}
	defer ns.Close()
	inside, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("opening the network namespace of container %s: %w", st.ID, err)
	}
	defer inside.Close()
	if _, err := inside.LinkByName(a.Interface); err == nil {
		return nil
	}
	hostName, peerName := vethNames(st.ID, a.Interface)
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostName}, PeerName: peerName}); err != nil {
		return fmt.Errorf("creating veth pair %s/%s: %w", hostName, peerName, err)
	}
	defer func() {
		if err != nil {
			if host, lerr := netlink.LinkByName(hostName); lerr == nil {
				err = errors.Join(err, netlink.LinkDel(host))
			}
		}
	}()
	peer, err := netlink.LinkByName(peerName)
	if err != nil {
		return err
	}
	if err := netlink.LinkSetNsFd(peer, int(ns)); err != nil {
		return fmt.Errorf("moving %s into container %s's network namespace: %w", peerName, st.ID, err)
	}
	if peer, err = inside.LinkByName(peerName); err != nil {
		return err
	}
	hw, _ := net.ParseMAC(a.HardwareAddress)
	addr, err := netlink.ParseAddr(a.Address)
	if err != nil {
		return err
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"renaming it " + a.Interface, func() error { return inside.LinkSetName(peer, a.Interface) }},
		{"setting its hardware address " + a.HardwareAddress, func() error { return inside.LinkSetHardwareAddr(peer, hw) }},
		{"adding address " + a.Address, func() error { return inside.AddrAdd(peer, addr) }},
		{"setting it up", func() error { return inside.LinkSetUp(peer) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("%s in container %s: %s: %w", peerName, st.ID, s.what, err)
		}
	}
	host, err := netlink.LinkByName(hostName)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(host)
}
