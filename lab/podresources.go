package lab

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dralab/dralab/internal/podresources"
	"github.com/dralab/dralab/lab/internal/backend"
)

// ErrNoPodResources means the lab's backend does not reach its kubelets'
// podresources sockets from this host.
var ErrNoPodResources = errors.New("this lab's kubelets serve the podresources API inside their node containers, not on this host")

// PodResources asks a node's kubelet, through its podresources API, which
// devices each container got: the view a monitoring agent on the node has
// (one row per DRA device of a claim the container uses).
func (l *Lab) PodResources(ctx context.Context, node string) ([]podresources.Row, error) {
	var names []string
	found := false
	for _, n := range l.cfg.Nodes {
		names = append(names, n.Name)
		found = found || n.Name == node
	}
	if !found {
		return nil, fmt.Errorf("lab %s has no node %q; its nodes: %s", l.cfg.Name, node, strings.Join(names, ", "))
	}
	pr, ok := l.backend.(backend.PodResourcer)
	if !ok {
		return nil, fmt.Errorf("%w (%s backend)", ErrNoPodResources, l.backend.Name())
	}
	socket, err := pr.PodResourcesSocket(l.cfg.Name, node)
	if err != nil {
		return nil, err
	}
	return podresources.List(ctx, socket)
}
