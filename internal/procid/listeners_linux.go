package procid

import (
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/procfs"
)

// tcpListen is the kernel's TCP_LISTEN state in /proc/net/tcp.
const tcpListen = 0x0A

// Listeners are the TCP sockets (IPv4 and IPv6) the processes listen on,
// as /proc has them now. A process that is no longer the one the ID
// recorded has none.
func Listeners(ids []ID) ([]Listener, error) {
	fs, err := procfs.NewDefaultFS()
	if err != nil {
		return nil, err
	}
	inodes := map[uint64]bool{}
	for _, id := range ids {
		if !id.Alive() {
			continue
		}
		p, err := fs.Proc(id.PID)
		if err != nil {
			continue
		}
		targets, err := p.FileDescriptorTargets()
		if err != nil {
			continue // ended since
		}
		for _, t := range targets {
			var inode uint64
			if _, err := fmt.Sscanf(t, "socket:[%d]", &inode); err == nil {
				inodes[inode] = true
			}
		}
	}
	var out []Listener
	for _, read := range []func() (procfs.NetTCP, error){fs.NetTCP, fs.NetTCP6} {
		lines, err := read()
		if errors.Is(err, os.ErrNotExist) {
			continue // no IPv6
		}
		if err != nil {
			return nil, err
		}
		for _, l := range lines {
			if l.St == tcpListen && inodes[l.Inode] {
				out = append(out, Listener{IP: l.LocalAddr, Port: int(l.LocalPort)})
			}
		}
	}
	return out, nil
}
