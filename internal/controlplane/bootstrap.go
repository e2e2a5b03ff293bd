package controlplane

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/component-helpers/auth/rbac/reconciliation"
	"k8s.io/klog/v2"
	schedulingapiv1 "k8s.io/kubernetes/pkg/apis/scheduling/v1"
	rbacrest "k8s.io/kubernetes/pkg/registry/rbac/rest"
	schedulingrest "k8s.io/kubernetes/pkg/registry/scheduling/rest"
	"k8s.io/kubernetes/plugin/pkg/auth/authorizer/rbac/bootstrappolicy"
)

// The API server's two bootstrap hooks — the default RBAC policy and the
// system priority classes — each wait a whole second before their first
// attempt (a poll that sleeps first), and /readyz waits for both: a second
// of every lab's start spent idle. The lab disables them and runs hooks of
// its own that write the same objects at once, retrying as often as the
// API server needs while its storage comes up. The objects are Kubernetes'
// own (bootstrappolicy, the scheduling API's SystemPriorityClasses), and
// the roles are reconciled with Kubernetes' own reconciliation, as
// upstream's hook does; TestBootstrapPolicyIsKubernetes compares a lab's
// with them.
var replacedHooks = []string{rbacrest.PostStartHookName, schedulingrest.PostStartHookName}

const (
	rbacHook     = "dralab/bootstrap-roles"
	priorityHook = "dralab/bootstrap-system-priority-classes"
)

// bootstrapTimeout is how long a hook retries before the API server gives
// up, as upstream's hooks do (30 s).
const bootstrapTimeout = 30 * time.Second

// addBootstrapHooks adds the lab's bootstrap hooks to the server whose
// configuration disabled replacedHooks.
func addBootstrapHooks(s *genericapiserver.GenericAPIServer) error {
	if err := s.AddPostStartHook(rbacHook, func(ctx genericapiserver.PostStartHookContext) error {
		return bootstrapUntilDone(ctx, "the default RBAC policy", ensureRBACPolicy)
	}); err != nil {
		return err
	}
	return s.AddPostStartHook(priorityHook, func(ctx genericapiserver.PostStartHookContext) error {
		return bootstrapUntilDone(ctx, "the system priority classes", ensurePriorityClasses)
	})
}

// bootstrapUntilDone runs ensure at once and then every 100 ms until it
// writes everything, for at most bootstrapTimeout.
func bootstrapUntilDone(hook genericapiserver.PostStartHookContext, what string, ensure func(context.Context, kubernetes.Interface) error) error {
	client, err := kubernetes.NewForConfig(hook.LoopbackClientConfig)
	if err != nil {
		return fmt.Errorf("bootstrapping %s: %w", what, err)
	}
	logger := klog.FromContext(hook)
	var last error
	err = wait.PollUntilContextTimeout(hook, 100*time.Millisecond, bootstrapTimeout, true, func(ctx context.Context) (bool, error) {
		last = ensure(ctx, client)
		if last != nil {
			logger.V(2).Info("Bootstrapping, will retry", "what", what, "err", last)
		}
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("bootstrapping %s: %w (last error: %w)", what, err, last)
	}
	return nil
}

// ensurePriorityClasses creates each system priority class that is missing.
func ensurePriorityClasses(ctx context.Context, client kubernetes.Interface) error {
	var errs []error
	for _, pc := range schedulingapiv1.SystemPriorityClasses() {
		_, err := client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("priority class %s: %w", pc.Name, err))
		}
	}
	return errors.Join(errs...)
}

// bootstrapPolicy is Kubernetes' default RBAC policy: the roles and
// bindings of its users, nodes and controllers.
type bootstrapPolicy struct {
	clusterRoles        []rbacv1.ClusterRole
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	roles               map[string][]rbacv1.Role
	roleBindings        map[string][]rbacv1.RoleBinding
}

func defaultPolicy() bootstrapPolicy {
	return bootstrapPolicy{
		clusterRoles:        append(bootstrappolicy.ClusterRoles(), bootstrappolicy.ControllerRoles()...),
		clusterRoleBindings: append(bootstrappolicy.ClusterRoleBindings(), bootstrappolicy.ControllerRoleBindings()...),
		roles:               bootstrappolicy.NamespaceRoles(),
		roleBindings:        bootstrappolicy.NamespaceRoleBindings(),
	}
}

// policyObject is one object of the policy: its key (kind/namespace/name),
// how to create it, and how to reconcile it with what is stored.
type policyObject struct {
	key       string
	create    func(context.Context) error
	reconcile func() error
}

// objects are the policy's objects, for client.
func (p bootstrapPolicy) objects(client kubernetes.Interface) []policyObject {
	var out []policyObject
	rbac := client.RbacV1()
	for i := range p.clusterRoles {
		r := &p.clusterRoles[i]
		o := reconciliation.ReconcileRoleOptions{Role: reconciliation.ClusterRoleRuleOwner{ClusterRole: r},
			Client: reconciliation.ClusterRoleModifier{Client: rbac.ClusterRoles()}, Confirm: true}
		out = append(out, policyObject{key: "clusterrole//" + r.Name,
			create: func(ctx context.Context) error {
				_, err := rbac.ClusterRoles().Create(ctx, r, metav1.CreateOptions{})
				return err
			},
			reconcile: func() error { _, err := o.Run(); return err }})
	}
	for i := range p.clusterRoleBindings {
		b := &p.clusterRoleBindings[i]
		o := reconciliation.ReconcileRoleBindingOptions{RoleBinding: reconciliation.ClusterRoleBindingAdapter{ClusterRoleBinding: b},
			Client: reconciliation.ClusterRoleBindingClientAdapter{Client: rbac.ClusterRoleBindings()}, Confirm: true}
		out = append(out, policyObject{key: "clusterrolebinding//" + b.Name,
			create: func(ctx context.Context) error {
				_, err := rbac.ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{})
				return err
			},
			reconcile: func() error { _, err := o.Run(); return err }})
	}
	for ns, roles := range p.roles {
		for i := range roles {
			r := &roles[i]
			o := reconciliation.ReconcileRoleOptions{Role: reconciliation.RoleRuleOwner{Role: r},
				Client: reconciliation.RoleModifier{Client: rbac, NamespaceClient: client.CoreV1().Namespaces()}, Confirm: true}
			out = append(out, policyObject{key: "role/" + ns + "/" + r.Name,
				create: func(ctx context.Context) error {
					_, err := rbac.Roles(ns).Create(ctx, r, metav1.CreateOptions{})
					return err
				},
				reconcile: func() error { _, err := o.Run(); return err }})
		}
	}
	for ns, bindings := range p.roleBindings {
		for i := range bindings {
			b := &bindings[i]
			o := reconciliation.ReconcileRoleBindingOptions{RoleBinding: reconciliation.RoleBindingAdapter{RoleBinding: b},
				Client: reconciliation.RoleBindingClientAdapter{Client: rbac, NamespaceClient: client.CoreV1().Namespaces()}, Confirm: true}
			out = append(out, policyObject{key: "rolebinding/" + ns + "/" + b.Name,
				create: func(ctx context.Context) error {
					_, err := rbac.RoleBindings(ns).Create(ctx, b, metav1.CreateOptions{})
					return err
				},
				reconcile: func() error { _, err := o.Run(); return err }})
		}
	}
	return out
}

// stored are the keys of the RBAC objects stored now, as objects keys
// them.
func stored(ctx context.Context, client kubernetes.Interface) (map[string]bool, error) {
	keys := map[string]bool{}
	rbac := client.RbacV1()
	crs, err := rbac.ClusterRoles().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range crs.Items {
		keys["clusterrole//"+o.Name] = true
	}
	crbs, err := rbac.ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range crbs.Items {
		keys["clusterrolebinding//"+o.Name] = true
	}
	rs, err := rbac.Roles(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range rs.Items {
		keys["role/"+o.Namespace+"/"+o.Name] = true
	}
	rbs, err := rbac.RoleBindings(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	for _, o := range rbs.Items {
		keys["rolebinding/"+o.Namespace+"/"+o.Name] = true
	}
	return keys, nil
}

// ensureRBACPolicy writes every object of the default policy, sixteen at a
// time (the objects are independent: a binding may name a role not yet
// written): an object not stored is created at once, one stored (a lab
// started again) or one whose creation fails (its namespace not yet made)
// is reconciled as Kubernetes reconciles it.
func ensureRBACPolicy(ctx context.Context, client kubernetes.Interface) error {
	have, err := stored(ctx, client)
	if err != nil {
		return err
	}
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
		sem  = make(chan struct{}, 16)
	)
	for _, obj := range defaultPolicy().objects(client) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if !have[obj.key] && obj.create(ctx) == nil {
				return
			}
			err := retry.OnError(retry.DefaultBackoff, func(err error) bool {
				return apierrors.IsConflict(err) || apierrors.IsServiceUnavailable(err)
			}, obj.reconcile)
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", obj.key, err))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(errs...)
}
