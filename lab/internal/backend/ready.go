package backend

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// nodesReadyTimeout bounds the wait for a broken lab; a warm one is Ready
// in seconds.
const nodesReadyTimeout = 2 * time.Minute

// SameName maps a cluster node to the lab node of the same name.
func SameName(n *v1.Node) string { return n.Name }

// NodeReady is a node's Ready condition.
func NodeReady(n *v1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return string(c.Status)
		}
	}
	return string(v1.ConditionUnknown)
}

// LogNode is the log component of a node's kubelet; a driver's is its
// role (nodedrivers.Kind.Role: "driver", "nic-driver", …).
const LogNode = "node"

// WaitReady waits until every configured node is registered and
// Ready and its GPUs are published: as ResourceSlices of the GPU driver for
// DRA nodes, as allocatable extended resources for device-plugin nodes;
// and its NICs and CPU complexes, as ResourceSlices of their drivers.
// logOf names the log of a node's component (LogNode, or a driver's role) that
// explains what is missing.
func WaitReady(ctx context.Context, kubeconfig string, cfg *config.Config, labNode func(*v1.Node) string, logOf func(node, component string) string) error {
	return WaitReadySince(ctx, kubeconfig, cfg, time.Time{}, labNode, logOf)
}

// WaitReadySince is WaitReady for a cluster whose nodes may carry an old
// Ready condition (a lab resumed on its etcd data): a node counts only once
// its kubelet has reported its status at or after since.
func WaitReadySince(ctx context.Context, kubeconfig string, cfg *config.Config, since time.Time, labNode func(*v1.Node) string, logOf func(node, component string) string) error {
	client, err := kubeclient.New(kubeconfig)
	if err != nil {
		return err
	}
	missing := map[string]notReady{}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, nodesReadyTimeout, true, func(ctx context.Context) (bool, error) {
		nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		sliceList, err := client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		missing = nodesNotReady(cfg, nodes.Items, sliceList.Items, since, labNode)
		return len(missing) == 0, nil
	})
	if err != nil {
		var msgs []string
		for name, why := range missing {
			msgs = append(msgs, fmt.Sprintf("node %s %s (log: %s)", name, why.why, logOf(name, why.component)))
		}
		slices.Sort(msgs)
		return fmt.Errorf("waiting for nodes: %w: %s", err, strings.Join(msgs, "; "))
	}
	// A pod made in the default namespace is refused until the controller
	// manager has made its ServiceAccount: a lab is up once a user's
	// first kubectl run works.
	if err := cluster.WaitForServiceAccount(ctx, client, metav1.NamespaceDefault); err != nil {
		return fmt.Errorf("waiting for the default namespace's ServiceAccount: %w", err)
	}
	return nil
}

// notReady is what a node lacks, and the component whose log explains it:
// LogNode, or a driver's role.
type notReady struct {
	why       string
	component string
}

// nodesNotReady says, per configured node, what it still lacks: to be
// registered, Ready and reporting, then what each of its drivers publishes
// (nodedrivers).
func nodesNotReady(cfg *config.Config, nodes []v1.Node, rs []resourceapi.ResourceSlice, since time.Time, labNode func(*v1.Node) string) map[string]notReady {
	byName := map[string]*v1.Node{}
	for i := range nodes {
		byName[labNode(&nodes[i])] = &nodes[i]
	}
	published := nodedrivers.IndexSlices(rs)
	missing := map[string]notReady{}
	for _, n := range cfg.Nodes {
		node, ok := byName[n.Name]
		switch {
		case !ok:
			missing[n.Name] = notReady{why: "is not registered", component: LogNode}
		case NodeReady(node) != string(v1.ConditionTrue):
			missing[n.Name] = notReady{why: "is not Ready", component: LogNode}
		case reportedBefore(node, since):
			missing[n.Name] = notReady{why: "has not reported its status since the lab started", component: LogNode}
		default:
			if why, role := published.NotReady(cfg, n, node); why != "" {
				missing[n.Name] = notReady{why: why, component: role}
			}
		}
	}
	return missing
}

// reportedBefore tells whether the node's last Ready heartbeat is older
// than since (whose sub-second part the API's timestamps do not keep).
func reportedBefore(n *v1.Node, since time.Time) bool {
	if since.IsZero() {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second))
		}
	}
	return true
}
