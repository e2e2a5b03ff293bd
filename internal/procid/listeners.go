package procid

import (
	"fmt"
	"net"
)

// Listener is a TCP socket a process listens on.
type Listener struct {
	IP   net.IP
	Port int
}

func (l Listener) String() string { return net.JoinHostPort(l.IP.String(), fmt.Sprint(l.Port)) }
