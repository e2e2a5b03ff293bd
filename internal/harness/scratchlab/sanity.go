package scratchlab

import (
	"context"
	"fmt"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/manifest"
	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// SanityConfig points the conformance suite's sanity checks at the lab
// node with most devices of the manifest's driver: its plugin sockets and
// CDI directory are host paths of the lab, and a killed driver is
// restarted by the lab.
func SanityConfig(ctx context.Context, stateDir string, client kubernetes.Interface, m *manifest.Manifest) (sanity.Config, error) {
	dir := labstate.Dir(stateDir)
	node, err := busiestNode(ctx, client, m.Driver)
	if err != nil {
		return sanity.Config{}, err
	}
	nd := dir.Node(node)
	return sanity.Config{
		Manifest:     m,
		Client:       client,
		NodeName:     node,
		RegistrarDir: nd.PluginsRegistry(),
		CDIDir:       nd.CDI(),
		Restart:      func(ctx context.Context) error { return RestartDriverOf(ctx, stateDir, m.Driver, node) },
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

// RestartDriver kills the node's driver and waits for the lab to start it
// again, as a crashed plugin would be restarted by its DaemonSet.
func RestartDriver(ctx context.Context, stateDir string, node string) error {
	return restart(ctx, stateDir, labstate.RoleDriver, node)
}

// RestartDriverOf is RestartDriver for the lab's driver of that name: the
// process of dralab's driver of that name (the NIC driver's for
// nic.dralab.dev), else the node's main (outside) driver.
func RestartDriverOf(ctx context.Context, stateDir, driver, node string) error {
	role := labstate.RoleDriver
	if k, ok := nodedrivers.OfDriver(driver); ok {
		role = k.Role()
	}
	return restart(ctx, stateDir, role, node)
}

func restart(ctx context.Context, stateDir, role, node string) error {
	dir := labstate.Dir(stateDir)
	st, err := dir.ReadStatus()
	if err != nil {
		return err
	}
	p, ok := st.Process(role, node)
	if !ok || !p.Running {
		return fmt.Errorf("the lab runs no %s on node %s", role, node)
	}
	if err := p.ID.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing the driver of %s: %w", node, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st, err := dir.ReadStatus()
		if err != nil {
			return false, nil
		}
		q, ok := st.Process(role, node)
		return ok && q.Running && q.ID != p.ID && q.ID.Alive(), nil
	})
	if err != nil {
		return fmt.Errorf("waiting 30s for the lab to restart the driver of %s: %w", node, err)
	}
	return nil
}
