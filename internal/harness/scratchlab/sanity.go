package scratchlab

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/status"
)

// SanityConfig points the conformance suite's sanity checks at the node
// of lab l with most devices of the manifest's driver: its plugin sockets
// and CDI directory are host paths of the lab (its status names them), and
// a killed driver is restarted by the lab.
func SanityConfig(ctx context.Context, l *lab.Lab, client kubernetes.Interface, m *manifest.Manifest) (sanity.Config, error) {
	node, err := busiestNode(ctx, client, m.Driver)
	if err != nil {
		return sanity.Config{}, err
	}
	st, err := l.Status(ctx)
	if err != nil {
		return sanity.Config{}, err
	}
	i := slices.IndexFunc(st.Nodes, func(n status.NodeStatus) bool { return n.Name == node })
	if i < 0 || st.Nodes[i].RegistrarDir == "" {
		return sanity.Config{}, fmt.Errorf("lab %s does not say where node %s's kubelet plugins are", l.Config().Name, node)
	}
	return sanity.Config{
		Manifest:     m,
		Client:       client,
		NodeName:     node,
		RegistrarDir: st.Nodes[i].RegistrarDir,
		CDIDir:       st.Nodes[i].CDIDir,
		Restart:      func(ctx context.Context) error { return l.RestartDriver(ctx, m.Driver, node) },
	}, nil
}

// busiestNode is the node with most plain devices of the driver: the
// sanity checks prepare devices directly, without the allocator, so a
// partition (drawing on counters another device uses) or a shared device
// is not one they may take as free.
func busiestNode(ctx context.Context, client kubernetes.Interface, driverName string) (string, error) {
	slices, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driverName})
	if err != nil {
		return "", err
	}
	counts := map[string]int{}
	best := ""
	for _, s := range slices.Items {
		if s.Spec.NodeName == nil {
			continue
		}
		n := *s.Spec.NodeName
		for _, d := range s.Spec.Devices {
			if len(d.ConsumesCounters) == 0 && (d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations) {
				counts[n]++
			}
		}
		if best == "" || counts[n] > counts[best] || (counts[n] == counts[best] && n < best) {
			best = n
		}
	}
	if best == "" {
		return "", fmt.Errorf("no node publishes devices of %s", driverName)
	}
	return best, nil
}
