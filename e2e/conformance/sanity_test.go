package conformance

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/dralab/dralab/drivers/conformance/sanity"
	"github.com/dralab/dralab/internal/labstate"
)

// TestSanity is layer 1 on one node of an embedded lab: the node's plugin
// sockets and CDI directory are host paths there, and the lab restarts a
// killed driver. The node is the one whose slices hold most devices.
func TestSanity(t *testing.T) {
	if testing.Short() {
		t.Skip(shortRun)
	}
	ctx := context.Background()
	kubeconfig := testenv.EnvConf().KubeconfigFile()
	// An embedded lab keeps its kubeconfig in its state directory.
	dir := labstate.Dir(filepath.Dir(kubeconfig))
	if _, err := dir.ReadStatus(); err != nil {
		t.Skipf("the sanity layer talks to a node's plugin sockets, and %s is not an embedded lab's kubeconfig: "+
			"run it on the embedded lab, or call drivers/conformance/sanity from the driver's own tests", kubeconfig)
	}
	client, err := kubernetes.NewForConfig(testenv.EnvConf().Client().RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	node, err := busiestNode(ctx, client, driver.Driver)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sanity checks of %s on node %s", driver.Driver, node)
	nd := dir.Node(node)
	sanity.Test(t, sanity.Config{
		Manifest:     driver,
		Client:       client,
		NodeName:     node,
		RegistrarDir: nd.PluginsRegistry(),
		CDIDir:       nd.CDI(),
		Restart:      func(ctx context.Context) error { return restartDriver(ctx, dir, node) },
	})
}

// busiestNode is the node with most devices of the driver.
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
		counts[n] += len(s.Spec.Devices)
		if best == "" || counts[n] > counts[best] || (counts[n] == counts[best] && n < best) {
			best = n
		}
	}
	if best == "" {
		return "", fmt.Errorf("no node publishes devices of %s", driverName)
	}
	return best, nil
}

// restartDriver kills the node's driver and waits for the lab to start it
// again, as a crashed plugin would be restarted by its DaemonSet.
func restartDriver(ctx context.Context, dir labstate.Dir, node string) error {
	st, err := dir.ReadStatus()
	if err != nil {
		return err
	}
	p, ok := st.Process(labstate.RoleDriver, node)
	if !ok || !p.Running {
		return fmt.Errorf("the lab runs no driver on node %s", node)
	}
	if err := syscall.Kill(p.PID, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing the driver of %s: %w", node, err)
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		st, err := dir.ReadStatus()
		if err != nil {
			return false, nil
		}
		q, ok := st.Process(labstate.RoleDriver, node)
		if !ok || !q.Running || q.PID == p.PID {
			return false, nil
		}
		_, err = os.Stat(fmt.Sprintf("/proc/%d", q.PID))
		return err == nil, nil
	})
}
