package podnet

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func node(name, cidr, ip string) *v1.Node {
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NodeSpec{PodCIDR: cidr}}
	if cidr != "" {
		n.Spec.PodCIDRs = []string{cidr}
	}
	if ip != "" {
		n.Status.Addresses = []v1.NodeAddress{{Type: v1.NodeHostName, Address: name}, {Type: v1.NodeInternalIP, Address: ip}}
	}
	return n
}

// TestConflist: a node's bridge hands out addresses of its own range, the
// one the controller manager gave it, and no other node's.
func TestConflist(t *testing.T) {
	data, err := Conflist("10.244.3.0/24")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Plugins []struct {
			Type string
			IPAM struct {
				Ranges [][]struct{ Subnet string }
			}
		}
	}
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if len(c.Plugins) != 2 || c.Plugins[0].Type != "bridge" || c.Plugins[0].IPAM.Ranges[0][0].Subnet != "10.244.3.0/24" || c.Plugins[1].Type != "portmap" {
		t.Errorf("the node's CNI configuration:\n%s", data)
	}
	if _, err := Conflist("10.244.3.0"); err == nil {
		t.Error("a range that is not one was taken")
	}
}

// TestRoutes: a route to each other node's range through its internal
// address; the node itself, and nodes without a range or an address yet,
// have none.
func TestRoutes(t *testing.T) {
	got := Routes("w1", []*v1.Node{
		node("cp", "10.244.0.0/24", "10.89.0.2"),
		node("w1", "10.244.1.0/24", "10.89.0.3"),
		node("w2", "10.244.2.0/24", "10.89.0.4"),
		node("w3", "", "10.89.0.5"),
		node("w4", "10.244.4.0/24", ""),
	})
	want := map[string]Route{
		"10.244.0.0/24": {Dst: "10.244.0.0/24", Via: "10.89.0.2"},
		"10.244.2.0/24": {Dst: "10.244.2.0/24", Via: "10.89.0.4"},
	}
	if len(got) != len(want) {
		t.Errorf("routes %v, want %v", got, want)
	}
	for k, r := range want {
		if got[k] != r {
			t.Errorf("route %s: %+v, want %+v", k, got[k], r)
		}
	}
}

type fakeRouter struct {
	ops  []string
	fail bool
}

func (f *fakeRouter) Replace(r Route) error {
	if f.fail {
		return errors.New("netlink: operation not permitted")
	}
	f.ops = append(f.ops, "replace "+r.Dst+" via "+r.Via)
	return nil
}

func (f *fakeRouter) Delete(r Route) error {
	f.ops = append(f.ops, "delete "+r.Dst)
	return nil
}

// TestAgentSync: the node's CNI configuration is written once the node has
// its range (not before: pods wait for it), and again only where it
// changes; routes follow the other nodes as they come, move and go; a
// route the node could not set is set at the next sync.
func TestAgentSync(t *testing.T) {
	ctx := context.Background()
	conf := filepath.Join(t.TempDir(), "net.d", "10-dralab.conflist")
	r := &fakeRouter{}
	a := &Agent{Node: "w1", ConfFile: conf, Router: r}
	step := func(name string, nodes []*v1.Node, wantOps []string) {
		t.Helper()
		r.ops = nil
		if err := a.Sync(ctx, nodes); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(r.ops, wantOps) {
			t.Errorf("%s: %v, want %v", name, r.ops, wantOps)
		}
	}

	step("before the node has a range", []*v1.Node{node("w1", "", "10.89.0.3"), node("w2", "10.244.2.0/24", "10.89.0.4")}, []string{"replace 10.244.2.0/24 via 10.89.0.4"})
	if _, err := os.Stat(conf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a CNI configuration before the node has its range: %v", err)
	}
	step("the node's range", []*v1.Node{node("w1", "10.244.1.0/24", "10.89.0.3"), node("w2", "10.244.2.0/24", "10.89.0.4")}, nil)
	data, err := os.ReadFile(conf)
	if want, _ := Conflist("10.244.1.0/24"); err != nil || string(data) != string(want) {
		t.Errorf("the node's CNI configuration: %s, %v", data, err)
	}
	step("a node comes, another moves", []*v1.Node{node("w1", "10.244.1.0/24", "10.89.0.3"), node("w2", "10.244.2.0/24", "10.89.0.9"), node("w3", "10.244.3.0/24", "10.89.0.5")},
		[]string{"replace 10.244.2.0/24 via 10.89.0.9", "replace 10.244.3.0/24 via 10.89.0.5"})
	step("a node goes", []*v1.Node{node("w1", "10.244.1.0/24", "10.89.0.3"), node("w3", "10.244.3.0/24", "10.89.0.5")}, []string{"delete 10.244.2.0/24"})

	r.fail = true
	if err := a.Sync(ctx, []*v1.Node{node("w1", "10.244.1.0/24", "10.89.0.3"), node("w3", "10.244.3.0/24", "10.89.0.5"), node("w4", "10.244.4.0/24", "10.89.0.6")}); err == nil {
		t.Error("a route the node could not set: no error")
	}
	r.fail = false
	step("the route set at the next sync", []*v1.Node{node("w1", "10.244.1.0/24", "10.89.0.3"), node("w3", "10.244.3.0/24", "10.89.0.5"), node("w4", "10.244.4.0/24", "10.89.0.6")}, []string{"replace 10.244.4.0/24 via 10.89.0.6"})
}

// TestEnsureRBAC: the nodes' group may read nodes through the lab's own
// ClusterRole and binding, made once however often the control plane's
// agent starts.
func TestEnsureRBAC(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	for range 2 {
		if err := EnsureRBAC(ctx, client); err != nil {
			t.Fatal(err)
		}
	}
	role, err := client.RbacV1().ClusterRoles().Get(ctx, RBACName, metav1.GetOptions{})
	if err != nil || len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"nodes"}) || !slices.Equal(role.Rules[0].Verbs, []string{"get", "list", "watch"}) {
		t.Errorf("ClusterRole %+v, %v", role, err)
	}
	b, err := client.RbacV1().ClusterRoleBindings().Get(ctx, RBACName, metav1.GetOptions{})
	if err != nil || b.RoleRef.Name != RBACName || len(b.Subjects) != 1 || b.Subjects[0].Kind != "Group" || b.Subjects[0].Name != "system:nodes" {
		t.Errorf("ClusterRoleBinding %+v, %v", b, err)
	}
}
