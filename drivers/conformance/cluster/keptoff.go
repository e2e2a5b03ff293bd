package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/results"
)

// keptOff is a check the cluster decided, not the driver: the allocator
// places the pod's claims on some nodes, and the cluster keeps the pod
// off every one of them (a taint it does not tolerate, its node selection,
// a cordon, a node not ready). The check is not verified, and says what
// to give the suite's pods.
type keptOff struct{ reason string }

func (k keptOff) Error() string { return k.reason }

// keptOffEvery is how often a wait asks the allocator again about a pod
// the scheduler keeps finding unschedulable: each asking reads the
// cluster.
const keptOffEvery = 5 * time.Second

// keptOffCheck is an unschedulable pod's last asking.
type keptOffCheck struct {
	at     time.Time
	reason string
}

// keptOff says, of a pod the scheduler found unschedulable, whether the
// cluster keeps it off every node its claims fit: a settled keptOff
// error, nil otherwise (not unschedulable, no node fits its claims, a node
// it may use does). The verdict is the allocator's
// (k8s.io/dynamic-resource-allocation/structured) over the cluster as it
// is, with the scheduler's own tests for taints and node selection.
func (k *kit) keptOff(ctx context.Context, pod *v1.Pod) error {
	if pod.Spec.NodeName != "" || !slices.ContainsFunc(pod.Status.Conditions, func(c v1.PodCondition) bool {
		return c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable
	}) {
		return nil
	}
	k.keptOffMu.Lock()
	defer k.keptOffMu.Unlock()
	if k.keptOffChecks == nil {
		k.keptOffChecks = map[string]keptOffCheck{}
	}
	last, ok := k.keptOffChecks[pod.Name]
	if !ok || time.Since(last.at) >= keptOffEvery {
		reason, err := k.keptOffBy(ctx, pod.Name)
		if err != nil {
			return fmt.Errorf("asking the allocator where pod %s fits: %w", pod.Name, err)
		}
		last = keptOffCheck{at: time.Now(), reason: reason}
		k.keptOffChecks[pod.Name] = last
	}
	if last.reason == "" {
		return nil
	}
	return settle(keptOff{last.reason})
}

// keptOffBy is what keeps the pod off every node the allocator places its
// claims on, among the nodes the check places it on, in words; "" where
// nothing does.
func (k *kit) keptOffBy(ctx context.Context, name string) (string, error) {
	s, err := allocation.Read(ctx, k.client, k.ns, allocation.Vocabulary{})
	if err != nil {
		return "", err
	}
	i := slices.IndexFunc(s.Pods, func(p v1.Pod) bool { return p.Name == name })
	if i < 0 {
		return "", nil
	}
	pod := &s.Pods[i]
	v, err := s.Verdict(ctx, pod)
	if err != nil || v == nil {
		return "", err
	}
	// The nodes the check itself places the pod on (its node affinity):
	// a node the check keeps it off is the check's design, not the
	// cluster's doing.
	own := pod.DeepCopy()
	own.Spec.NodeSelector = nil
	placed := nodeaffinity.GetRequiredNodeAffinity(own)
	var fits []string
	nodes := map[string][]string{}
	for _, n := range v.Nodes {
		if !n.Fits || s.Nodes[n.Node] == nil {
			continue
		}
		if ok, err := placed.Match(s.Nodes[n.Node]); err != nil || !ok {
			continue
		}
		if len(n.Outside) == 0 {
			// A node it may use: the scheduler's refusal is another's.
			return "", nil
		}
		fits = append(fits, n.Node)
		// What keeps it off, with the nodes of each.
		for _, b := range n.Outside {
			w := b.What
			nodes[w] = append(nodes[w], n.Node)
		}
	}
	var parts []string
	for _, w := range slices.Sorted(maps.Keys(nodes)) {
		parts = append(parts, fmt.Sprintf("%s (%s)", w, strings.Join(nodes[w], ", ")))
	}
	if len(fits) == 0 {
		return "", nil
	}
	return fmt.Sprintf("the cluster keeps pod %s off %s, where its claims fit: %s; give the suite's pods what the cluster asks (--toleration KEY=VALUE:EFFECT, the manifest's proofPod)",
		name, strings.Join(fits, ", "), strings.Join(parts, "; ")), nil
}

// keptOffVerdict is the case of a check the cluster kept off its nodes.
func keptOffVerdict(name string, k keptOff) (results.Status, string) {
	return results.KeptOff(name + ": " + k.reason)
}
