package scenarios

import (
	"fmt"
	"path"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dralab/dralab/drivers/conformance/allocation"
)

// CheckGroups checks every group expectation on the namespace's PodGroups,
// its pods and claims (snap) and their allocation table (rows).
func CheckGroups(expect []GroupExpectation, groups []schedulingv1beta1.PodGroup, snap *allocation.Snapshot, rows []allocation.Row, inv Inventory) []ExpectationResult {
	out := make([]ExpectationResult, 0, len(expect))
	for _, e := range expect {
		res := ExpectationResult{Expected: e.describe(inv)}
		var matching []*schedulingv1beta1.PodGroup
		for i := range groups {
			if ok, _ := path.Match(e.Groups, groups[i].Name); ok {
				matching = append(matching, &groups[i])
				res.Pods = append(res.Pods, groups[i].Name)
			}
		}
		if e.Gone {
			res.Failures = checkGone(e, matching, snap)
			out = append(out, res)
			continue
		}
		meeting := 0
		var misses []string
		for _, g := range matching {
			if f := checkGroup(e, g, snap, rows); len(f) == 0 {
				meeting++
			} else {
				misses = append(misses, fmt.Sprintf("group %s: %s", g.Name, strings.Join(f, "; ")))
			}
		}
		switch {
		case len(matching) == 0:
			res.Failures = []string{"no PodGroup matches"}
		case e.Count == nil && meeting < len(matching):
			res.Failures = misses
		case e.Count != nil && meeting != inv.Resolve(e.Count):
			res.Failures = []string{fmt.Sprintf("%d of %d groups meet it, want %s (%d)", meeting, len(matching), e.Count, inv.Resolve(e.Count))}
			res.Failures = append(res.Failures, misses...)
		}
		out = append(out, res)
	}
	return out
}

// groupFailuresOf lists the mismatches of group expectations.
func groupFailuresOf(expect []GroupExpectation, results []ExpectationResult) []string {
	var failures []string
	for i, r := range results {
		for _, f := range r.Failures {
			failures = append(failures, fmt.Sprintf("expectGroups[%d] (groups %s): %s", i, expect[i].Groups, f))
		}
	}
	return failures
}

// groupPods are the snapshot's pods of a group, in creation order.
func groupPods(snap *allocation.Snapshot, group string) []*v1.Pod {
	var out []*v1.Pod
	for i := range snap.Pods {
		if allocation.GroupOf(&snap.Pods[i]) == group {
			out = append(out, &snap.Pods[i])
		}
	}
	return out
}

// checkGroup lists where a group falls short of an expectation.
func checkGroup(e GroupExpectation, g *schedulingv1beta1.PodGroup, snap *allocation.Snapshot, rows []allocation.Row) []string {
	var f []string
	pods := groupPods(snap, g.Name)
	var bound []*v1.Pod
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			bound = append(bound, p)
		}
	}
	if e.Bound != "" {
		got := ""
		switch {
		case len(pods) == 0:
			got = "no pods"
		case len(bound) == len(pods):
			got = BoundAll
		case len(bound) == 0:
			got = BoundNone
		default:
			got = BoundSome
		}
		if got != e.Bound {
			f = append(f, fmt.Sprintf("%d of its %d pods bound (%s), want %s", len(bound), len(pods), got, e.Bound))
		}
	}
	if e.Scheduled != nil {
		c := apimeta.FindStatusCondition(g.Status.Conditions, schedulingv1beta1.PodGroupInitiallyScheduled)
		scheduled := c != nil && c.Status == metav1.ConditionTrue
		switch {
		case scheduled != *e.Scheduled:
			f = append(f, fmt.Sprintf("condition %s is %s, want %v", schedulingv1beta1.PodGroupInitiallyScheduled, conditionString(c), *e.Scheduled))
		case e.Reason != "" && (c == nil || c.Reason != e.Reason):
			f = append(f, fmt.Sprintf("condition %s is %s, want reason %s", schedulingv1beta1.PodGroupInitiallyScheduled, conditionString(c), e.Reason))
		}
	}
	for _, name := range e.Claims {
		f = append(f, checkGroupClaim(g, name, bound, snap, rows)...)
	}
	if label := e.SameDomain; label != "" {
		domains := map[string][]string{}
		for _, p := range bound {
			n := snap.Nodes[p.Spec.NodeName]
			v := "(no " + label + ")"
			if n != nil {
				if lv, ok := n.Labels[label]; ok {
					v = lv
				}
			}
			domains[v] = append(domains[v], p.Name)
		}
		if len(domains) > 1 || slices.ContainsFunc(keysOf(domains), func(d string) bool { return strings.HasPrefix(d, "(no ") }) {
			f = append(f, fmt.Sprintf("its bound pods span %s domains %v", label, domains))
		}
	}
	return f
}

// checkGroupClaim checks a group's claim: made once for the group, allocated,
// reserved for the group, and what each of its bound pods holds.
func checkGroupClaim(g *schedulingv1beta1.PodGroup, name string, bound []*v1.Pod, snap *allocation.Snapshot, rows []allocation.Row) []string {
	idx := slices.IndexFunc(g.Spec.ResourceClaims, func(c schedulingv1beta1.PodGroupResourceClaim) bool { return c.Name == name })
	if idx < 0 {
		return []string{fmt.Sprintf("spec.resourceClaims has no entry %s (the API server drops the field unless DRAWorkloadResourceClaims is on)", name)}
	}
	claimName := ""
	if n := g.Spec.ResourceClaims[idx].ResourceClaimName; n != nil {
		claimName = *n
	} else {
		for _, st := range g.Status.ResourceClaimStatuses {
			if st.Name == name && st.ResourceClaimName != nil {
				claimName = *st.ResourceClaimName
			}
		}
	}
	if claimName == "" {
		return []string{fmt.Sprintf("status.resourceClaimStatuses names no claim for %s", name)}
	}
	claim := snap.Claims[g.Namespace+"/"+claimName]
	switch {
	case claim == nil:
		return []string{fmt.Sprintf("its claim %s for %s does not exist", claimName, name)}
	case claim.Status.Allocation == nil && len(bound) > 0:
		return []string{fmt.Sprintf("its claim %s is not allocated, though %d of its pods are bound", claimName, len(bound))}
	}
	var f []string
	if len(bound) > 0 && !slices.ContainsFunc(claim.Status.ReservedFor, func(ref resourceapi.ResourceClaimConsumerReference) bool {
		return ref.Resource == "podgroups" && ref.Name == g.Name
	}) {
		f = append(f, fmt.Sprintf("its claim %s is reserved for %v, not for the group", claimName, reservedNames(claim.Status.ReservedFor)))
	}
	for _, p := range bound {
		if !slices.ContainsFunc(rows, func(r allocation.Row) bool { return r.Pod == p.Name && r.Claim == claimName && r.Device != "" }) {
			f = append(f, fmt.Sprintf("pod %s does not hold the devices of the group's claim %s", p.Name, claimName))
		}
	}
	return f
}

// checkGone: no group matches, and no claim owned by a group of the
// pattern is left.
func checkGone(e GroupExpectation, matching []*schedulingv1beta1.PodGroup, snap *allocation.Snapshot) []string {
	var f []string
	for _, g := range matching {
		f = append(f, fmt.Sprintf("group %s still exists", g.Name))
	}
	for key, c := range snap.Claims {
		for _, o := range c.OwnerReferences {
			if ok, _ := path.Match(e.Groups, o.Name); ok && o.Kind == "PodGroup" {
				f = append(f, fmt.Sprintf("claim %s, owned by PodGroup %s, is still there", key, o.Name))
			}
		}
	}
	slices.Sort(f)
	return f
}

func (e GroupExpectation) describe(inv Inventory) string {
	var parts []string
	if e.Count != nil {
		parts = append(parts, fmt.Sprintf("%s (%d) groups", e.Count, inv.Resolve(e.Count)))
	}
	if e.Gone {
		parts = append(parts, "gone, with the claims they owned")
	}
	if e.Bound != "" {
		parts = append(parts, e.Bound+" pods bound")
	}
	if e.Scheduled != nil {
		s := fmt.Sprintf("%s=%v", schedulingv1beta1.PodGroupInitiallyScheduled, *e.Scheduled)
		if e.Reason != "" {
			s += " (" + e.Reason + ")"
		}
		parts = append(parts, s)
	}
	for _, c := range e.Claims {
		parts = append(parts, "group claim "+c+" shared by its pods")
	}
	if e.SameDomain != "" {
		parts = append(parts, "one "+e.SameDomain+" domain")
	}
	return "groups " + e.Groups + ": " + strings.Join(parts, ", ")
}

func conditionString(c *metav1.Condition) string {
	if c == nil {
		return "unset"
	}
	s := string(c.Status)
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	return s
}

func keysOf[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func reservedNames(refs []resourceapi.ResourceClaimConsumerReference) []string {
	var out []string
	for _, r := range refs {
		out = append(out, r.Resource+"/"+r.Name)
	}
	return out
}
