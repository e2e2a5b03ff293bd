package cluster

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Pods are kept on and off nodes by the nodes' names: on a cluster whose
// nodes' kubernetes.io/hostname labels differ from their names (a
// --hostname-override, a cloud's instance names), a pod kept on node a
// fits a and only a, and a pod kept off a and b fits only c. The
// scheduler's own node-affinity matcher decides.
func TestPodsArePlacedByNodeName(t *testing.T) {
	nodes := []*v1.Node{}
	for _, name := range []string{"a", "b", "c"} {
		nodes = append(nodes, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{v1.LabelHostname: "host-" + name + ".example.com"}}})
	}
	fits := func(p *v1.Pod) []string {
		t.Helper()
		var out []string
		for _, n := range nodes {
			ok, err := nodeaffinity.GetRequiredNodeAffinity(p).Match(n)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				out = append(out, n.Name)
			}
		}
		return out
	}
	on := &v1.Pod{Spec: v1.PodSpec{NodeSelector: map[string]string{"team": "x"}}}
	onNodes([]string{"a"})(on)
	if got := fits(on); len(got) != 1 || got[0] != "a" {
		t.Errorf("a pod kept on node a fits %v", got)
	}
	onTwo := &v1.Pod{}
	onNodes([]string{"a", "c"})(onTwo)
	if got := fits(onTwo); len(got) != 2 || got[0] != "a" || got[1] != "c" {
		t.Errorf("a pod kept on nodes a and c fits %v", got)
	}
	off := &v1.Pod{}
	offNodes(off, []string{"a", "b"})
	if got := fits(off); len(got) != 1 || got[0] != "c" {
		t.Errorf("a pod kept off nodes a and b fits %v", got)
	}
	// The API server takes exactly one value in a requirement on a
	// field.
	for _, p := range []*v1.Pod{on, onTwo, off} {
		for _, term := range p.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
			if len(term.MatchExpressions) > 0 {
				t.Errorf("a term selects nodes by label: %+v", term.MatchExpressions)
			}
			for _, r := range term.MatchFields {
				if r.Key != "metadata.name" || len(r.Values) != 1 {
					t.Errorf("field requirement %+v: want metadata.name with one value", r)
				}
			}
		}
	}
}
