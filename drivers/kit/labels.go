package kit

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// NodeLabels reads the labels of the driver's node, for a driver whose
// one DaemonSet serves nodes that differ (each node's profile, device
// count and place in its labels); what names the labels' purpose in the
// error.
func NodeLabels(ctx context.Context, client kubernetes.Interface, node, what string) (map[string]string, error) {
	n, err := client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading node %s for its %s labels: %w", node, what, err)
	}
	return n.Labels, nil
}
