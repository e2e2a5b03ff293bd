// Package podnet is the pod network of a kind node of the lab's own image,
// which has no kindnet (its image would come from a registry): every node
// gets its own range of pod addresses from the controller manager
// (spec.podCIDR, from the cluster's pod subnet), its pods sit on a bridge
// with addresses of that range (the CNI configuration this package
// writes), and each node routes the other nodes' ranges to them, so that
// any pod reaches any other by its address, as on kind's own image.
package podnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// ConfFile is the node's CNI configuration, where containerd looks.
const ConfFile = "/etc/cni/net.d/10-dralab.conflist"

// Kubeconfig is the kubelet's kubeconfig, which kubeadm writes as the node
// joins: the agent reads nodes with the kubelet's credentials.
const Kubeconfig = "/etc/kubernetes/kubelet.conf"

// Conflist is a node's CNI configuration for its pod range: a bridge whose
// gateway is the range's first address, pods masqueraded behind the node
// on their way out of the range (to the API server, through kube-proxy's
// rules; to other nodes' pods, which answer the node), and port mappings.
func Conflist(podCIDR string) ([]byte, error) {
	if _, _, err := net.ParseCIDR(podCIDR); err != nil {
		return nil, fmt.Errorf("the node's pod range %q: %w", podCIDR, err)
	}
	type obj = map[string]any
	c := obj{
		"cniVersion": "1.0.0",
		"name":       "dralab",
		"plugins": []obj{
			{
				"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": obj{
					"type":   "host-local",
					"ranges": [][]obj{{{"subnet": podCIDR}}},
					"routes": []obj{{"dst": "0.0.0.0/0"}},
				},
			},
			{"type": "portmap", "capabilities": obj{"portMappings": true}},
		},
	}
	return json.MarshalIndent(c, "", "  ")
}

// Route is a route to another node's pods: its range, through its
// address.
type Route struct {
	Dst, Via string
}

// Routes are the routes to every other node's pod range, through the
// node's internal address, by range; nodes without a range or an address
// yet are left out.
func Routes(self string, nodes []*v1.Node) map[string]Route {
	out := map[string]Route{}
	for _, n := range nodes {
		if n.Name == self {
			continue
		}
		var via string
		for _, a := range n.Status.Addresses {
			if a.Type == v1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil {
				via = a.Address
				break
			}
		}
		for _, cidr := range cidrs(n) {
			if _, ipnet, err := net.ParseCIDR(cidr); err == nil && ipnet.IP.To4() != nil && via != "" {
				out[ipnet.String()] = Route{Dst: ipnet.String(), Via: via}
			}
		}
	}
	return out
}

// cidrs are a node's pod ranges.
func cidrs(n *v1.Node) []string {
	if len(n.Spec.PodCIDRs) > 0 {
		return n.Spec.PodCIDRs
	}
	if n.Spec.PodCIDR != "" {
		return []string{n.Spec.PodCIDR}
	}
	return nil
}

// Router changes the node's routes.
type Router interface {
	Replace(r Route) error
	Delete(r Route) error
}

// Netlink changes the routes of the network namespace the agent runs in,
// the node container's.
type Netlink struct{}

func (Netlink) route(r Route) (*netlink.Route, error) {
	_, dst, err := net.ParseCIDR(r.Dst)
	if err != nil {
		return nil, err
	}
	return &netlink.Route{Dst: dst, Gw: net.ParseIP(r.Via)}, nil
}

// Replace adds the route or changes it to go through r.Via.
func (l Netlink) Replace(r Route) error {
	nr, err := l.route(r)
	if err != nil {
		return err
	}
	return netlink.RouteReplace(nr)
}

// Delete removes the route.
func (l Netlink) Delete(r Route) error {
	nr, err := l.route(r)
	if err != nil {
		return err
	}
	return netlink.RouteDel(nr)
}

// Agent keeps a node's pod network: its CNI configuration once the node
// has its range, and its routes to the other nodes' ranges as nodes come,
// change and go.
type Agent struct {
	Node     string
	ConfFile string
	Router   Router

	mu     sync.Mutex
	routes map[string]Route
	conf   []byte
}

// Sync brings the node's configuration and routes to what nodes say.
func (a *Agent) Sync(ctx context.Context, nodes []*v1.Node) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.routes == nil {
		a.routes = map[string]Route{}
	}
	logger := klog.FromContext(ctx)
	for _, n := range nodes {
		if n.Name != a.Node || len(cidrs(n)) == 0 {
			continue
		}
		conf, err := Conflist(cidrs(n)[0])
		if err != nil {
			return err
		}
		if !bytes.Equal(conf, a.conf) {
			if err := writeFile(a.ConfFile, conf); err != nil {
				return err
			}
			a.conf = conf
			logger.Info("Wrote the node's CNI configuration", "file", a.ConfFile, "podCIDR", cidrs(n)[0])
		}
	}
	want := Routes(a.Node, nodes)
	var errs []error
	for _, dst := range slices.Sorted(maps.Keys(want)) {
		r := want[dst]
		if a.routes[dst] == r {
			continue
		}
		if err := a.Router.Replace(r); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", r.Dst, r.Via, err))
			continue
		}
		a.routes[dst] = r
		logger.Info("Routed another node's pods", "range", r.Dst, "via", r.Via)
	}
	for _, dst := range slices.Sorted(maps.Keys(a.routes)) {
		if _, ok := want[dst]; ok {
			continue
		}
		if err := a.Router.Delete(a.routes[dst]); err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", dst, err))
			continue
		}
		delete(a.routes, dst)
		logger.Info("Removed the route of a node gone", "range", dst)
	}
	if len(errs) > 0 {
		return fmt.Errorf("the node's routes: %v", errs)
	}
	return nil
}

// writeFile replaces a file whole: containerd never reads half of it.
func writeFile(file string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// Run keeps the node's pod network until ctx ends, from a watch of the
// cluster's nodes: each change syncs the whole (a failed sync is tried
// again at the next change, or a second later).
func (a *Agent) Run(ctx context.Context, client kubernetes.Interface) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	nodes := factory.Core().V1().Nodes()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, DeleteFunc: poke, UpdateFunc: func(_, n any) { poke(n) },
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		return ctx.Err()
	}
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	// dirty: the nodes changed, or the last sync failed, since the last
	// sync that held.
	dirty := true
	for {
		if dirty {
			list, err := nodes.Lister().List(labels.Everything())
			if err == nil {
				err = a.Sync(ctx, list)
			}
			if dirty = err != nil; dirty {
				klog.FromContext(ctx).Error(err, "Syncing the node's pod network; trying again")
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			dirty = true
		case <-retry.C:
		}
	}
}

// AdminKubeconfig is the administrator's kubeconfig, which kubeadm init
// writes on the control plane's node only, with the kubelet's.
const AdminKubeconfig = "/etc/kubernetes/admin.conf"

// RBACName names the ClusterRole and ClusterRoleBinding that let every
// node's agent read the cluster's nodes: the node authorizer lets a
// kubelet's credentials read their own node only.
const RBACName = "dralab:pod-network"

// EnsureRBAC gives the nodes' agents (group system:nodes, the kubelets'
// credentials) the reading of nodes, with the control plane's
// administrator client: what kindnet's ServiceAccount is bound to.
func EnsureRBAC(ctx context.Context, admin kubernetes.Interface) error {
	labels := map[string]string{"app.kubernetes.io/managed-by": "dralab"}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: RBACName, Labels: labels},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch"}}},
	}
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ClusterRole %s: %w", RBACName, err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: RBACName, Labels: labels},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: RBACName},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("ClusterRoleBinding %s: %w", RBACName, err)
	}
	return nil
}
