package labserver

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/internal/atomicfile"
	"github.com/dralab/dralab/internal/driverauth"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/lab/config"
)

// A lab's drivers run as processes, not pods, but with what a driver's
// DaemonSet has in a cluster: a ServiceAccount per driver and mode with the
// chart's rules (internal/driverauth), a token bound to the node it serves
// (which the own-node-slices policy and the API server's associated-node
// check read) and nothing else. A driver that works in the lab therefore
// works with its chart, and one that needs more fails here first.

// driverAccess is the ServiceAccount of one driver in one mode.
type driverAccess struct {
	driver, mode string
}

// serviceAccount names it after the driver, as a DNS label.
func (a driverAccess) serviceAccount() string {
	name := strings.ReplaceAll(a.driver, ".", "-")
	if a.mode != driverauth.ModeDRA {
		name += "-" + a.mode
	}
	return name
}

// nodeDriver is one driver the lab runs on a node: its access, and the
// file its token goes to.
type nodeDriver struct {
	access driverAccess
	token  string
}

// driversOf are the drivers node n runs (nodedrivers.Of).
func driversOf(dir labstate.Dir, cfg *config.Config, n config.Node) []nodeDriver {
	var out []nodeDriver
	for _, k := range nodedrivers.Of(cfg, n) {
		out = append(out, nodeDriver{driverAccess{k.Driver(cfg), k.Mode(n)}, dir.Node(n.Name).Driver(k.Role()).Token})
	}
	return out
}

// grantDrivers creates the ServiceAccounts of the lab's drivers, their
// roles and, for drivers that publish slices, the policy that pins their
// writes to their own node.
func grantDrivers(ctx context.Context, client kubernetes.Interface, dir labstate.Dir, cfg *config.Config) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: labstate.DriversNamespace}}
	if _, err := client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", ns.Name, err)
	}
	// Each driver's objects are written at once: they refer to each other
	// by name only, and the drivers wait for them while the API server
	// still starts.
	g, ctx := errgroup.WithContext(ctx)
	seen := map[driverAccess]bool{}
	for _, n := range cfg.Nodes {
		for _, d := range driversOf(dir, cfg, n) {
			a := d.access
			if seen[a] {
				continue
			}
			seen[a] = true
			grant(ctx, g, client, a)
		}
	}
	return g.Wait()
}

// grant writes, in g, what a driver's access is made of: its ServiceAccount,
// its ClusterRole and binding, and in DRA mode the admission policy that
// keeps its slices to its own node.
func grant(ctx context.Context, g *errgroup.Group, client kubernetes.Interface, a driverAccess) {
	wrap := func(err error) error {
		if err != nil {
			return fmt.Errorf("granting driver %s (%s mode): %w", a.driver, a.mode, err)
		}
		return nil
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: a.serviceAccount(), Namespace: labstate.DriversNamespace}}
	g.Go(func() error {
		if _, err := client.CoreV1().ServiceAccounts(sa.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return wrap(fmt.Errorf("creating ServiceAccount %s/%s: %w", sa.Namespace, sa.Name, err))
		}
		return nil
	})
	name := "dralab:driver:" + a.serviceAccount()
	g.Go(func() error {
		role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: driverauth.Rules(a.driver, a.mode)}
		return wrap(createOrUpdate(ctx, role, client.RbacV1().ClusterRoles().Create, client.RbacV1().ClusterRoles().Get, client.RbacV1().ClusterRoles().Update,
			func(cur, want *rbacv1.ClusterRole) { cur.Rules = want.Rules }))
	})
	g.Go(func() error {
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}},
		}
		if _, err := client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return wrap(fmt.Errorf("creating ClusterRoleBinding %s: %w", name, err))
		}
		return nil
	})
	if a.mode != driverauth.ModeDRA && a.mode != driverauth.ModeNetworkAttached {
		return
	}
	policy, policyBinding := driverauth.OwnNodeSlices("dralab-"+a.serviceAccount()+"-own-node-slices", sa.Namespace, sa.Name, a.driver)
	g.Go(func() error {
		vaps := client.AdmissionregistrationV1().ValidatingAdmissionPolicies()
		return wrap(createOrUpdate(ctx, policy, vaps.Create, vaps.Get, vaps.Update,
			func(cur, want *admissionregistrationv1.ValidatingAdmissionPolicy) { cur.Spec = want.Spec }))
	})
	g.Go(func() error {
		if _, err := client.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, policyBinding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return wrap(fmt.Errorf("creating ValidatingAdmissionPolicyBinding %s: %w", policyBinding.Name, err))
		}
		return nil
	})
}

// createOrUpdate creates obj or, on a resumed lab made by an older dralab,
// brings the existing object's content (set) up to date.
func createOrUpdate[T interface {
	*E
	metav1.Object
}, E any](ctx context.Context, obj T,
	create func(context.Context, T, metav1.CreateOptions) (T, error),
	get func(context.Context, string, metav1.GetOptions) (T, error),
	update func(context.Context, T, metav1.UpdateOptions) (T, error),
	set func(cur, want T)) error {
	_, err := create(ctx, obj, metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("creating %s: %w", obj.GetName(), err)
		}
		return nil
	}
	cur, err := get(ctx, obj.GetName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading %s: %w", obj.GetName(), err)
	}
	set(cur, obj)
	if _, err := update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("updating %s: %w", obj.GetName(), err)
	}
	return nil
}

// issueDriverToken writes node's driver d a token of its ServiceAccount,
// bound to the node's Node object, once the node has registered it.
func issueDriverToken(ctx context.Context, client kubernetes.Interface, d nodeDriver, node string) error {
	a := d.access
	var n *corev1.Node
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		var err error
		n, err = client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		return fmt.Errorf("node %s: waiting for its Node, to which its driver's token is bound: %w", node, err)
	}
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(driverauth.TokenLifetime / time.Second)),
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID},
	}}
	tr, err := client.CoreV1().ServiceAccounts(labstate.DriversNamespace).CreateToken(ctx, a.serviceAccount(), req, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: a token for its driver's ServiceAccount %s/%s: %w", node, labstate.DriversNamespace, a.serviceAccount(), err)
	}
	if err := atomicfile.Write(d.token, []byte(tr.Status.Token), 0o600); err != nil {
		return fmt.Errorf("node %s: writing its driver's token: %w", node, err)
	}
	return nil
}

// tokenKeeper keeps the lab's drivers' tokens valid: it renews a token
// when a third of its life has passed by the wall clock (after a machine
// slept, at the first look after it woke), when its file is missing or
// unreadable, and when the API server refuses it (a driver gets 401: its
// Node was registered anew, say), which a TokenReview tells.
type tokenKeeper struct {
	client kubernetes.Interface
	dir    labstate.Dir
	cfg    *config.Config
	// now reads the wall clock.
	now func() time.Time
}

// keep looks at every token each time tick fires, until ctx ends.
func (k *tokenKeeper) keep(ctx context.Context, tick <-chan time.Time) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		k.check(ctx)
	}
}

// check renews the tokens that are due. A failure is logged and tried
// again at the next look.
func (k *tokenKeeper) check(ctx context.Context) {
	logger := klog.FromContext(ctx)
	for _, n := range k.cfg.Nodes {
		for _, d := range driversOf(k.dir, k.cfg, n) {
			// A node deleted meanwhile is not waited for.
			checkCtx, cancel := context.WithTimeout(ctx, time.Minute)
			why, err := k.renewal(checkCtx, d)
			if err == nil && why != "" {
				logger.Info("Renewing a driver's token", "node", n.Name, "driver", d.access.driver, "reason", why)
				err = issueDriverToken(checkCtx, k.client, d, n.Name)
			}
			cancel()
			if err != nil && ctx.Err() == nil {
				logger.Error(err, "Keeping a driver's token", "node", n.Name, "driver", d.access.driver)
			}
		}
	}
}

// renewal says why d's token is to be issued anew, "" while it is good.
func (k *tokenKeeper) renewal(ctx context.Context, d nodeDriver) (string, error) {
	data, err := os.ReadFile(d.token)
	if err != nil {
		return fmt.Sprintf("its file cannot be read: %v", err), nil
	}
	token := strings.TrimSpace(string(data))
	times, err := driverauth.ParseTokenTimes(token)
	if err != nil {
		return fmt.Sprintf("its file holds no token: %v", err), nil
	}
	if now := k.now(); !now.Before(times.RenewAt()) {
		return fmt.Sprintf("a third of its life is past by the wall clock (issued %s, expires %s, now %s)",
			times.Issued.UTC().Format(time.RFC3339), times.Expires.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339)), nil
	}
	review, err := k.client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("asking the API server whether it accepts the token: %w", err)
	}
	if !review.Status.Authenticated {
		return fmt.Sprintf("the API server refuses it: %s", review.Status.Error), nil
	}
	return "", nil
}
