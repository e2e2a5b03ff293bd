package lab_test

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// assertBootstrapPolicyIsKubernetes checks what the lab's own bootstrap
// hooks wrote in place of the API server's: Kubernetes' reconciliation,
// asked to compare only, finds every object of the default RBAC policy
// (users', nodes' and controllers' roles and bindings, cluster-wide and
// per namespace) as Kubernetes defines it, and every system priority class
// exists with its value.
func assertBootstrapPolicyIsKubernetes(ctx context.Context, t *testing.T, kubeconfig string) {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(cfg)
	compare := func(what string, run func() (reconciliation.ReconcileOperation, error)) {
		op, err := run()
		if err != nil || op != reconciliation.ReconcileNone {
			t.Errorf("%s: reconciliation would %q (%v)", what, op, err)
		}
	}
	role := func(o reconciliation.ReconcileRoleOptions) func() (reconciliation.ReconcileOperation, error) {
		return func() (reconciliation.ReconcileOperation, error) {
			res, err := o.Run()
			if err != nil {
				return "", err
			}
			return res.Operation, nil
		}
	}
	binding := func(o reconciliation.ReconcileRoleBindingOptions) func() (reconciliation.ReconcileOperation, error) {
		return func() (reconciliation.ReconcileOperation, error) {
			res, err := o.Run()
			if err != nil {
				return "", err
			}
			return res.Operation, nil
		}
	}
	n := 0
	for _, r := range append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...) {
		compare("clusterrole "+r.Name, role(reconciliation.ReconcileRoleOptions{
			Role:   reconciliation.ClusterRoleRuleOwner{ClusterRole: &r},
			Client: reconciliation.ClusterRoleModifier{Client: client.RbacV1().ClusterRoles()},
		}))
		n++
	}
	for _, b := range append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...) {
		compare("clusterrolebinding "+b.Name, binding(reconciliation.ReconcileRoleBindingOptions{
			RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: &b},
			Client:      reconciliation.ClusterRoleBindingClientAdapter{Client: client.RbacV1().ClusterRoleBindings()},
		}))
		n++
	}
	for ns, roles := range bootstrappolicy.NamespaceRoles() {
		for _, r := range roles {
			compare("role "+ns+"/"+r.Name, role(reconciliation.ReconcileRoleOptions{
				Role:   reconciliation.RoleRuleOwner{Role: &r},
				Client: reconciliation.RoleModifier{Client: client.RbacV1(), NamespaceClient: client.CoreV1().Namespaces()},
			}))
			n++
		}
	}
	for ns, bindings := range bootstrappolicy.NamespaceRoleBindings() {
		for _, b := range bindings {
			compare("rolebinding "+ns+"/"+b.Name, binding(reconciliation.ReconcileRoleBindingOptions{
				RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: &b},
				Client:      reconciliation.RoleBindingClientAdapter{Client: client.RbacV1(), NamespaceClient: client.CoreV1().Namespaces()},
			}))
			n++
		}
	}
	if n < 100 {
		t.Errorf("Kubernetes' default policy has only %d objects", n)
	}
	for _, want := range schedulingapiv1.SystemPriorityClasses() {
		got, err := client.SchedulingV1().PriorityClasses().Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil || got.Value != want.Value {
			t.Errorf("priority class %s: %+v, %v; want value %d", want.Name, got, err, want.Value)
		}
	}
}
