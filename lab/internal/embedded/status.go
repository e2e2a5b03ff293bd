package embedded

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/procid"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/internal/backend"
	"github.com/dralab/dralab/lab/status"
)

// Status implements backend.Backend.
func (b *Backend) Status(ctx context.Context, name string) (*status.Status, error) {
	dir := b.dir(name)
	st := &status.Status{Name: name, Backend: b.Name(), Phase: status.PhaseAbsent, StateDir: string(dir), Kubeconfig: dir.Kubeconfig()}
	if _, err := os.Stat(string(dir)); errors.Is(err, os.ErrNotExist) {
		return st, nil
	}
	for _, nd := range dir.Nodes() {
		st.HostLinks = append(st.HostLinks, nd.ShortLink())
	}
	running, s, err := b.running(dir)
	if err != nil {
		return nil, err
	}
	if !running {
		st.Phase = status.PhaseFailed
		st.Message = "the lab process is not running (stale state: `go run mage.go lab:up` replaces it, `go run mage.go lab:down` removes it)"
		if cfg, err := config.Load(dir.Config()); err == nil && b.resumable(dir, cfg) == "" {
			st.Message = "the lab process is not running (`go run mage.go lab:up` resumes the lab on its etcd data, `go run mage.go lab:down` removes it)"
		}
		if s, err := dir.ReadStatus(); err == nil && s.Message != "" {
			st.Message = s.Message + "; " + st.Message
		}
		return st, nil
	}
	st.Phase, st.Message, st.PID, st.APIServer = status.Phase(s.Phase), s.Message, s.PID, s.APIServer
	st.Processes = append(st.Processes, process(status.RoleLab, "", s.ID, true))
	for _, p := range s.Processes {
		st.Processes = append(st.Processes, process(p.Role, p.Node, p.ID, p.Running))
	}

	ready := map[string]string{}
	if client, err := kubeclient.New(dir.Kubeconfig()); err == nil {
		if nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil {
			for i := range nodes.Items {
				ready[nodes.Items[i].Name] = backend.NodeReady(&nodes.Items[i])
			}
		} else {
			st.Phase, st.Message = status.PhaseDegraded, "the API server does not answer: "+err.Error()
		}
	}
	cfg, err := config.Load(dir.Config())
	if err != nil {
		return nil, err
	}
	for _, n := range cfg.Nodes {
		nd := dir.Node(n.Name)
		ns := status.NodeStatus{Name: n.Name, Ready: ready[n.Name],
			RegistrarDir: nd.PluginsRegistry(), PluginsDir: nd.Plugins(), CDIDir: nd.CDI(),
			DevicePluginsDir: nodedrivers.DevicePluginsDir(n, nd), CheckpointDir: nd.Driver(labstate.RoleDriver).Checkpoint}
		if ns.Ready == "" {
			ns.Ready = "NotRegistered"
		}
		var nodeOK, runtimeOK, driverOK bool
		ns.Process, ns.PID, nodeOK = processState(s, labstate.RoleNode, n.Name)
		runtimeOK, driverOK = true, true
		if n.Kind == config.NodeReal {
			var runtime string
			runtime, _, runtimeOK = processState(s, labstate.RoleContainerd, n.Name)
			ns.Process = "kubelet " + ns.Process + ", containerd " + runtime
		}
		// The node's main driver's state is said alone, the others' by
		// name: "running; NIC driver running".
		var profiles, drivers []string
		for _, k := range nodedrivers.Of(cfg, n) {
			profiles = append(profiles, k.Describe(cfg, n))
			state, pid, ok := processState(s, k.Role(), n.Name)
			if k.Role() == labstate.RoleDriver {
				ns.DriverPID = pid
			} else {
				state = k.Name() + " " + state
			}
			drivers = append(drivers, state)
			driverOK = driverOK && ok
		}
		ns.Profile, ns.Driver = strings.Join(profiles, ", "), strings.Join(drivers, "; ")
		ns.Healthy = nodeOK && runtimeOK && driverOK
		if !ns.Healthy {
			st.Phase = status.PhaseDegraded
		}
		st.Nodes = append(st.Nodes, ns)
	}
	return st, nil
}

// process is a recorded process as lab/status has it.
func process(role, node string, id procid.ID, running bool) status.Process {
	return status.Process{Role: role, Node: node, PID: id.PID, StartTime: id.StartTime, BootID: id.BootID, Running: running}
}

// processState describes a node's process of a role, its PID while it
// runs, and whether that is well. A lab still starting has not started
// drivers yet.
func processState(s *labstate.Status, role, node string) (string, int, bool) {
	p, found := s.Process(role, node)
	switch {
	case !found && s.Phase == labstate.PhaseStarting:
		return "starting", 0, true
	case !found:
		return "not started", 0, false
	case p.Running && p.ID.Alive():
		if p.Restarts > 0 {
			return fmt.Sprintf("running (pid %d, %d restarts, last: %s)", p.PID, p.Restarts, p.Exit), p.PID, true
		}
		return fmt.Sprintf("running (pid %d)", p.PID), p.PID, true
	case p.Exit != "":
		return "exited: " + p.Exit, 0, false
	default:
		// Dead, and the lab process has not recorded it yet.
		return "exited", 0, false
	}
}
