package labserver

import (
	"context"
	"fmt"
	"os"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	memory "k8s.io/client-go/discovery/cached"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/kubeapply"
	"github.com/dralab/dralab/internal/kubeclient"
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
	client, err := kubeclient.New(dir.Kubeconfig())
	if err != nil {
		return err
	}
	for _, class := range gpu.DeviceClasses() {
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

// grantDrivers lets the lab's DRA drivers (labstate.DriverGroup) read
// ResourceClaims (what the kubelet plugin helper reads before preparing)
// and write their device status.
func grantDrivers(ctx context.Context, dir labstate.Dir) error {
	client, err := kubeclient.New(dir.Kubeconfig())
	if err != nil {
		return err
	}
	const name = "dralab:driver"
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
			// Claim device status (conditions, data, network data): what a
			// driver's chart grants its ServiceAccount. RBAC cannot narrow
			// it further (claims are named by users, in any namespace).
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"update", "patch"}},
			// And, with DRAResourceClaimGranularStatusAuthorization (beta,
			// on in 1.37), per driver: the API server checks the synthetic
			// resourceclaims/driver subresource. Lab drivers authenticate
			// with node certificates, not node-bound ServiceAccount tokens,
			// so only the arbitrary-node verbs apply.
			{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, Verbs: []string{"arbitrary-node:update", "arbitrary-node:patch"}},
		},
	}
	if _, err := client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", name, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: labstate.DriverGroup}},
	}
	if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRoleBinding %s: %w", name, err)
	}
	return nil
}
