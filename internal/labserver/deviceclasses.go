package labserver

import (
	"context"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	memory "k8s.io/client-go/discovery/cached"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/internal/kubeapply"
	"github.com/dralab/dralab/internal/kubeclient"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// applyDeviceClasses creates the DeviceClasses of the drivers the lab's
// nodes run, as their Helm charts do on other clusters (the GPU driver's
// where a node serves GPUs through DRA).
func applyDeviceClasses(ctx context.Context, dir labstate.Dir, cfg *config.Config) error {
	classes := nodedrivers.DeviceClasses(cfg)
	if len(classes) == 0 {
		return nil
	}
	client, err := kubeclient.New(dir.Kubeconfig())
	if err != nil {
		return err
	}
	for _, class := range classes {
		// A lab resumed on its etcd data has them already.
		if _, err := client.ResourceV1().DeviceClasses().Create(ctx, &class, metav1.CreateOptions{FieldManager: "dralab"}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating DeviceClass %s: %w", class.Name, err)
		}
	}
	return nil
}

// applyManifests applies an outside driver's manifests (its DeviceClasses,
// say) once the control plane is up; namespaced objects go to "default".
func applyManifests(ctx context.Context, dir labstate.Dir, files []string) error {
	if len(files) == 0 {
		return nil
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", dir.Kubeconfig())
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return err
	}
	disco, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		return err
	}
	a := kubeapply.Applier{Dynamic: dyn, Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disco)), FieldManager: "dralab"}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("driver manifest: %w", err)
		}
		objs, err := kubeapply.Decode(f, data)
		if err != nil {
			return err
		}
		for _, obj := range objs {
			if _, err := a.Apply(ctx, obj, "default"); err != nil {
				return fmt.Errorf("driver manifest %s: %s %s: %w", f, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}
