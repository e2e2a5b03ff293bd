package allocation

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	"k8s.io/utils/ptr"
)

// Reason codes of a pod of a PodGroup that waits although its own claims
// could be allocated, as far as devices go.
const (
	// GangIncomplete: fewer pods of the group exist than its gang's
	// minCount; the scheduler does not try it until they do.
	GangIncomplete = "GangIncomplete"
	// GangShort: the cluster has fewer free matching devices than the
	// group's unbound pods need together.
	GangShort = "GangShort"
	// TopologyShort: the devices are there in all, but no domain of the
	// group's topology constraint has enough of them free.
	TopologyShort = "TopologyShort"
	// GangUnschedulable: the scheduler found no placement of the whole
	// group that dralab's reading of the devices can name (its message
	// says more).
	GangUnschedulable = "GangUnschedulable"
)

// group is what the snapshot knows of a pod's PodGroup.
type group struct {
	name     string
	pg       *schedulingv1beta1.PodGroup
	minCount int
	pods     int
	unbound  int
}

func (g group) String() string {
	s := "gang " + g.name
	if g.pg == nil {
		return s + " (no such PodGroup)"
	}
	if g.minCount > 0 {
		s += fmt.Sprintf(" (minCount %d, %d pods, %d bound)", g.minCount, g.pods, g.pods-g.unbound)
	} else {
		s += fmt.Sprintf(" (%d pods, %d bound)", g.pods, g.pods-g.unbound)
	}
	return s
}

// groupOf reads a pod's group; false for a pod of none.
func (s *Snapshot) groupOf(pod *v1.Pod) (group, bool) {
	name := GroupOf(pod)
	if name == "" {
		return group{}, false
	}
	g := group{name: name, pg: s.PodGroups[claimKey(pod.Namespace, name)]}
	if g.pg != nil && g.pg.Spec.SchedulingPolicy.Gang != nil {
		g.minCount = int(g.pg.Spec.SchedulingPolicy.Gang.MinCount)
	}
	for _, p := range s.GroupMembers(pod.Namespace, name) {
		g.pods++
		if p.Spec.NodeName == "" {
			g.unbound++
		}
	}
	return g, true
}

// GroupMembers are the pods of namespace's PodGroup group that count as
// its members: neither deleted nor ended. The report and the dashboard
// both count a group's pods with it.
func (s *Snapshot) GroupMembers(namespace, group string) []*v1.Pod {
	var out []*v1.Pod
	for i := range s.Pods {
		p := &s.Pods[i]
		if p.Namespace == namespace && GroupOf(p) == group && p.DeletionTimestamp == nil && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
			out = append(out, p)
		}
	}
	return out
}

// whyGroup explains a pod of a group whose own claims fit, as far as
// devices go: the group is incomplete, the cluster is short of devices for
// all of its unbound pods, or no domain of its topology constraint has
// them. message is the scheduler's word.
func (s *Snapshot) whyGroup(ctx context.Context, pod *v1.Pod, g group, message string) (string, string, error) {
	if g.pg == nil {
		return GangIncomplete, fmt.Sprintf("%s: the pod joins a PodGroup that does not exist; the scheduler waits for it", g), nil
	}
	if g.pods < g.minCount {
		return GangIncomplete, fmt.Sprintf("%s: %d more pods must exist before the scheduler tries the group", g, g.minCount-g.pods), nil
	}
	key := ""
	if c := g.pg.Spec.SchedulingConstraints; c != nil && len(c.Topology) > 0 {
		key = c.Topology[0].Key
	}
	holders := s.AllocatedDevices()
	nodeOfPool := map[string]string{}
	for _, sl := range s.Slices {
		nodeOfPool[sl.Spec.Driver+"/"+sl.Spec.Pool.Name] = ptr.Deref(sl.Spec.NodeName, "")
	}
	for _, ref := range podClaims(pod) {
		claim := s.Claims[claimKey(pod.Namespace, ref.name)]
		if claim == nil || claim.Status.Allocation != nil || s.sharedByGroup(claim, g.name) {
			continue
		}
		for _, req := range claim.Spec.Devices.Requests {
			alts := alternatives(req)
			if len(alts) == 0 {
				continue
			}
			var lines []string
			fits := false
			for _, alt := range alts {
				need := g.unbound * alt.count
				free, held, err := s.freeByDomain(ctx, alt, key, holders, nodeOfPool)
				if err != nil {
					return "", "", err
				}
				// Each pod's devices are on its own node: a domain holds as
				// many pods as its nodes do, each node as many as its free
				// devices make whole requests.
				total, totalPods := 0, 0
				pods := map[string]int{}
				for d, nodes := range free {
					for _, n := range nodes {
						total += n
						pods[d] += n / alt.count
					}
					totalPods += pods[d]
				}
				if key == "" && totalPods >= g.unbound || key != "" && slices.ContainsFunc(slices.Collect(maps.Values(pods)), func(n int) bool { return n >= g.unbound }) {
					fits = true
					break
				}
				what := fmt.Sprintf("its %d unbound pods need %d devices of %s for request %q (%d each)", g.unbound, need, alt.class, req.Name, alt.count)
				if alt.name != req.Name {
					what = fmt.Sprintf("as %s, %s", alt.name, what) // alt.name: request/subrequest
				}
				if key == "" {
					if total < need {
						lines = append(lines, fmt.Sprintf("%s, and %d are free", what, total))
					} else {
						lines = append(lines, fmt.Sprintf("%s, and %d are free, but the nodes hold %d of its pods (%s)", what, total, totalPods, perNodeWords(free["cluster"])))
					}
					continue
				}
				var domains []string
				for _, d := range slices.Sorted(maps.Keys(free)) {
					n := 0
					for _, c := range free[d] {
						n += c
					}
					part := fmt.Sprintf("%s %d free", d, n)
					if n >= need && pods[d] < g.unbound {
						part += fmt.Sprintf(", holding %d of its pods (%s)", pods[d], perNodeWords(free[d]))
					}
					if h := held[d]; len(h) > 0 {
						part += " (held by " + strings.Join(h, ", ") + ")"
					}
					domains = append(domains, part)
				}
				if len(domains) == 0 {
					lines = append(lines, fmt.Sprintf("%s in one %s domain, and no node labelled %s has a matching device", what, key, key))
					continue
				}
				lines = append(lines, fmt.Sprintf("%s in one %s domain; %s; %d free in all", what, key, strings.Join(domains, "; "), total))
			}
			if fits || len(lines) == 0 {
				continue
			}
			code := GangShort
			if key != "" {
				code = TopologyShort
			}
			return code, fmt.Sprintf("%s: %s", g, strings.Join(lines, "; or ")), nil
		}
	}
	return GangUnschedulable, fmt.Sprintf("%s: every pod's claims would fit on their own, but the scheduler placed no whole group: %s", g, message), nil
}

// sharedByGroup tells a claim the group shares (one allocation for all of
// its pods): it needs its devices once, not per pod.
func (s *Snapshot) sharedByGroup(claim *resourceapi.ResourceClaim, group string) bool {
	if pg := s.PodGroups[claimKey(claim.Namespace, group)]; pg != nil {
		for _, st := range pg.Status.ResourceClaimStatuses {
			if ptr.Deref(st.ResourceClaimName, "") == claim.Name {
				return true
			}
		}
		for _, c := range pg.Spec.ResourceClaims {
			if ptr.Deref(c.ResourceClaimName, "") == claim.Name {
				return true
			}
		}
	}
	return false
}

// freeByDomain counts an alternative's free matching devices (neither
// allocated nor tainted against it) by the value of a node label of their
// node ("" key: one domain, "cluster") and by node, and names the claims
// that hold the others in each.
func (s *Snapshot) freeByDomain(ctx context.Context, alt alternative, key string, holders map[string]string, nodeOfPool map[string]string) (map[string]map[string]int, map[string][]string, error) {
	free, held := map[string]map[string]int{}, map[string][]string{}
	candidates, err := s.matching(ctx, alt)
	if err != nil {
		return nil, nil, err
	}
	for _, c := range candidates {
		domain := "cluster"
		if key != "" {
			n := s.Nodes[nodeOfPool[c.driver+"/"+c.pool]]
			v, ok := "", false
			if n != nil {
				v, ok = n.Labels[key]
			}
			if !ok {
				continue // outside every domain: the group cannot use it
			}
			domain = v
		}
		if free[domain] == nil {
			free[domain] = map[string]int{}
		}
		if holder, ok := holders[c.driver+"/"+c.String()]; ok {
			if _, name, _ := strings.Cut(holder, "/"); !slices.Contains(held[domain], name) {
				held[domain] = append(held[domain], name)
			}
			continue
		}
		if len(s.blockingTaints(c, alt.tolerations)) > 0 {
			continue
		}
		free[domain][nodeOfPool[c.driver+"/"+c.pool]]++
	}
	for d := range held {
		slices.Sort(held[d])
	}
	return free, held, nil
}

// perNodeWords says how many free devices each node has: "n1 12, n2 4".
func perNodeWords(nodes map[string]int) string {
	var words []string
	for _, n := range slices.Sorted(maps.Keys(nodes)) {
		if nodes[n] > 0 {
			words = append(words, fmt.Sprintf("%s %d", n, nodes[n]))
		}
	}
	return strings.Join(words, ", ")
}
