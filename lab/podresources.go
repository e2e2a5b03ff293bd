package lab

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dralab/dralab/lab/internal/backend"
)

// ErrNoPodResources means the lab's backend does not reach its kubelets'
// podresources sockets from this host.
var ErrNoPodResources = errors.New("this lab's kubelets serve the podresources API inside their node containers, not on this host")

// PodResourcesSocket is the path of a node's kubelet podresources socket,
// through which the kubelet tells which devices each container got: the
// view a monitoring agent on the node has (lab:podresources reads it).
func (l *Lab) PodResourcesSocket(node string) (string, error) {
	if err := l.checkNode(node); err != nil {
		return "", err
	}
	pr, ok := l.backend.(backend.PodResourcer)
	if !ok {
		return "", fmt.Errorf("%w (%s backend)", ErrNoPodResources, l.backend.Name())
	}
	return pr.PodResourcesSocket(l.cfg.Name, node)
}

// checkNode refuses a node the lab does not have, naming those it has.
func (l *Lab) checkNode(node string) error {
	names := l.NodeNames()
	if !slices.Contains(names, node) {
		return fmt.Errorf("lab %s has no node %q; its nodes: %s", l.cfg.Name, node, strings.Join(names, ", "))
	}
	return nil
}
