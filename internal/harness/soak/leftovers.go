package soak

import (
	"net"
	"os"
	"strconv"
	"time"

	"github.com/dralab/dralab/internal/mounts"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/status"
)

// labResources are what a running lab holds on the host, as recorded
// before lab:down: its processes, their listeners, its state directory and
// its nodes' short links.
type labResources struct {
	procs     []procid.ID
	listeners []procid.Listener
	stateDir  string
	links     []string
}

// recordResources records what the lab holds now, as its status says.
func recordResources(st *lab.Status) (labResources, error) {
	r := labResources{stateDir: st.StateDir, links: st.HostLinks}
	for _, p := range st.Processes {
		r.procs = append(r.procs, processID(p))
	}
	var err error
	r.listeners, err = procid.Listeners(r.procs)
	return r, err
}

// processID is the identity of a process the lab recorded.
func processID(p status.Process) procid.ID {
	return procid.ID{PID: p.PID, StartTime: p.StartTime, BootID: p.BootID}
}

// left finds what remains of the recorded resources: processes that still
// run, ports that still accept connections, mounts under the state
// directory, the state directory and short links.
func (r labResources) left() []finding {
	var out []finding
	for _, p := range r.procs {
		if p.Alive() {
			out = append(out, newFinding(InvLeftovers, "a process of the lab still runs", p.String()))
		}
	}
	for _, l := range r.listeners {
		if c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(l.Port)), time.Second); err == nil {
			c.Close()
			out = append(out, newFinding(InvLeftovers, "a port of the lab still accepts connections", l.String()))
		}
	}
	ms, err := mounts.Under(r.stateDir)
	if err != nil {
		out = append(out, newFinding(InvLeftovers, "the mount table could not be read", err.Error()))
	}
	for _, m := range ms {
		out = append(out, newFinding(InvLeftovers, "a mount of the lab remains", m))
	}
	for _, p := range append([]string{r.stateDir}, r.links...) {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, newFinding(InvLeftovers, "a file of the lab remains", p))
		}
	}
	return out
}
