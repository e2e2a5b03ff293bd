package lab

import (
	"github.com/dralab/dralab/lab/internal/backend"
)

// DriverMetrics are the metrics addresses (host:port of /metrics) of the
// dralab drivers of a node, by driver name, where the lab's backend
// records them (the embedded lab does; kind does not: none). lab:metrics
// reads them beside the kubelets' and the scheduler's metrics.
func (l *Lab) DriverMetrics(node string) (map[string]string, error) {
	if err := l.checkNode(node); err != nil {
		return nil, err
	}
	dm, ok := l.backend.(backend.DriverMetricser)
	if !ok {
		return nil, nil
	}
	return dm.DriverMetrics(l.cfg.Name, node)
}

// NodeNames are the names of the lab's nodes, in the configuration's
// order.
func (l *Lab) NodeNames() []string {
	names := make([]string, 0, len(l.cfg.Nodes))
	for _, n := range l.cfg.Nodes {
		names = append(names, n.Name)
	}
	return names
}
