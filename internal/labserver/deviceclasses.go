package labserver

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab/config"
)

// applyDeviceClasses creates the GPU driver's DeviceClasses, as the driver's
// Helm chart does on other clusters, when any node carries GPUs served
// through DRA.
func applyDeviceClasses(ctx context.Context, dir labstate.Dir, cfg *config.Config) error {
	needed := false
	for _, n := range cfg.Nodes {
		needed = needed || (n.GPUs != nil && n.GPUs.Mode == config.GPUModeDRA)
	}
	if !needed {
		return nil
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", dir.Kubeconfig())
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	for _, class := range gpu.DeviceClasses() {
		// A lab's etcd starts empty: the classes cannot exist yet.
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, &class, metav1.CreateOptions{FieldManager: "dralab"}); err != nil {
			return fmt.Errorf("creating DeviceClass %s: %w", class.Name, err)
		}
	}
	return nil
}
