package kind

import (
	"bytes"
	"context"
	"fmt"
	"path"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	kindexec "sigs.k8s.io/kind/pkg/exec"

	"github.com/dralab/dralab/lab/internal/kindcmd"
)

var _ kindcmd.Backend = &Backend{}

// FaultsFile is where the chart's driver (faultInjection: true) watches
// for injected GPU faults, in its checkpoint directory on the node.
const FaultsFile = "/var/lib/dralab-driver/gpu-faults.json"

// node is the kind node container that stands for lab node node.
func (b *Backend) node(ctx context.Context, name, node string) (nodes.Node, error) {
	p, _, err := b.provider(name)
	if err != nil {
		return nil, err
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", b.Kubeconfig(name))
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, err
	}
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelLabNode + "=" + node})
	if err != nil {
		return nil, err
	}
	if len(list.Items) != 1 {
		return nil, fmt.Errorf("lab %s: %d kind nodes stand for node %s, want 1", name, len(list.Items), node)
	}
	internal, err := p.ListInternalNodes(name)
	if err != nil {
		return nil, err
	}
	for _, n := range internal {
		if n.String() == list.Items[0].Name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("lab %s: no kind node container %s", name, list.Items[0].Name)
}

// ReadGPUFaults implements kindcmd.Backend: the faults file on the kind
// node that stands for the lab node, read in the node's container, where
// the driver's DaemonSet pod has it mounted.
func (b *Backend) ReadGPUFaults(ctx context.Context, name, node string) ([]byte, string, error) {
	n, err := b.node(ctx, name, node)
	if err != nil {
		return nil, "", err
	}
	var old bytes.Buffer
	// A missing file is no fault: cat's failure leaves the buffer empty.
	_ = n.CommandContext(ctx, "sh", "-c", "cat "+FaultsFile+" 2>/dev/null || true").SetStdout(&old).Run()
	if old.Len() == 0 {
		return nil, n.String() + ":" + FaultsFile, nil
	}
	return old.Bytes(), n.String() + ":" + FaultsFile, nil
}

// WriteGPUFaults implements kindcmd.Backend.
func (b *Backend) WriteGPUFaults(ctx context.Context, name, node string, data []byte) error {
	n, err := b.node(ctx, name, node)
	if err != nil {
		return err
	}
	var cmd kindexec.Cmd
	if data == nil {
		cmd = n.CommandContext(ctx, "rm", "-f", FaultsFile)
	} else {
		// Written beside and renamed: the driver never reads half a file.
		tmp := path.Join(path.Dir(FaultsFile), ".gpu-faults.json.tmp")
		cmd = n.CommandContext(ctx, "sh", "-c", "mkdir -p "+path.Dir(FaultsFile)+" && cat > "+tmp+" && mv "+tmp+" "+FaultsFile).SetStdin(bytes.NewReader(data))
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("writing %s on kind node %s: %w", FaultsFile, n.String(), err)
	}
	return nil
}
