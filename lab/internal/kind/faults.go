package kind

import (
	"bytes"
	"context"
	"fmt"
	"path"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	kindexec "sigs.k8s.io/kind/pkg/exec"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/lab/internal/backend"
)

var _ backend.GPUFaulter = &Backend{}

// FaultsFile is where the chart's driver (faultInjection: true) watches
// for injected GPU faults, in its checkpoint directory on the node.
const FaultsFile = "/var/lib/dralab-driver/gpu-faults.json"

// UpdateGPUFaults implements backend.GPUFaulter: the faults file on the
// kind node that stands for the lab node, read and written in the node's
// container, where the driver's DaemonSet pod has it mounted.
func (b *Backend) UpdateGPUFaults(ctx context.Context, name, node string, update func(map[string]gpu.GPUFault)) error {
	p, _, err := b.provider()
	if err != nil {
		return err
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", b.Kubeconfig(name))
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: LabelLabNode + "=" + node})
	if err != nil {
		return err
	}
	if len(nodes.Items) != 1 {
		return fmt.Errorf("lab %s: %d kind nodes stand for node %s, want 1", name, len(nodes.Items), node)
	}
	internal, err := p.ListInternalNodes(name)
	if err != nil {
		return err
	}
	for _, n := range internal {
		if n.String() != nodes.Items[0].Name {
			continue
		}
		var old bytes.Buffer
		// A missing file is no fault: cat's failure leaves the buffer empty.
		_ = n.CommandContext(ctx, "sh", "-c", "cat "+FaultsFile+" 2>/dev/null || true").SetStdout(&old).Run()
		data, err := gpu.UpdateFaults(n.String()+":"+FaultsFile, old.Bytes(), update)
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
	return fmt.Errorf("lab %s: no kind node container %s", name, nodes.Items[0].Name)
}
