package lab

import (
	"context"
	"errors"
	"fmt"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/internal/backend"
)

// ErrNoDriverRestart means the lab's backend does not restart its drivers
// on request (a kind lab's run as DaemonSet pods: delete the pod).
var ErrNoDriverRestart = errors.New("this lab's backend does not restart drivers on request")

// RestartDriver kills a node's driver of that name and waits until the lab
// has started it again, as a crashed plugin is restarted by its DaemonSet:
// dralab's driver of that name (the NIC driver's for nic.dralab.dev), else
// the node's main driver (the GPU driver, or an outside driver).
func (l *Lab) RestartDriver(ctx context.Context, driver, node string) error {
	if err := l.checkNode(node); err != nil {
		return err
	}
	r, ok := l.backend.(backend.DriverRestarter)
	if !ok {
		return fmt.Errorf("%w (%s backend)", ErrNoDriverRestart, l.backend.Name())
	}
	role := labstate.RoleDriver
	if k, ok := nodedrivers.OfDriver(driver); ok {
		role = k.Role()
	}
	return r.RestartDriver(ctx, l.cfg.Name, role, node)
}
