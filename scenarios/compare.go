package scenarios

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/dralab/dralab/drivers/conformance/allocation"
)

// PodOutcome is what happened to one pod: its rows of the allocation table.
type PodOutcome struct {
	Name string
	Rows []allocation.Row
}

// phase is "Running", "Pending" (the scheduler found it unschedulable) or
// the pod's raw state.
func (p PodOutcome) phase() string {
	r := p.Rows[0]
	switch {
	case r.Phase == v1.PodRunning:
		return "Running"
	case r.Node == "" && r.Unschedulable:
		return "Pending"
	case r.Node == "":
		return "Pending (not yet tried by the scheduler)"
	default:
		return string(r.Phase) + " on " + r.Node
	}
}

func (p PodOutcome) devices() []allocation.Row {
	var out []allocation.Row
	for _, r := range p.Rows {
		if r.Device != "" {
			out = append(out, r)
		}
	}
	return out
}

// Outcomes groups an allocation table by pod, in table order.
func Outcomes(rows []allocation.Row) []PodOutcome {
	var out []PodOutcome
	index := map[string]int{}
	for _, r := range rows {
		i, ok := index[r.Pod]
		if !ok {
			i = len(out)
			index[r.Pod] = i
			out = append(out, PodOutcome{Name: r.Pod})
		}
		out[i].Rows = append(out[i].Rows, r)
	}
	return out
}

// Check compares a step's expectations with the pods' outcomes and returns
// one message per mismatch, each showing what was expected and what
// happened. An expectation with a count takes the next pods matching its
// pattern that no earlier counted expectation took (from the end with
// last); one without a count covers every pod matching its pattern.
func Check(expect []Expectation, outcomes []PodOutcome, inv Inventory) []string {
	return failuresOf(expect, CheckEach(expect, outcomes, inv))
}

func failuresOf(expect []Expectation, results []ExpectationResult) []string {
	var failures []string
	for i, r := range results {
		for _, f := range r.Failures {
			failures = append(failures, fmt.Sprintf("expect[%d] (pods %s): ", i, expect[i].Pods)+f)
		}
	}
	return failures
}

// ExpectationResult is one expectation checked: what it asked, in words,
// the pods it was checked on, and its mismatches (none: it held).
type ExpectationResult struct {
	Expected string
	Pods     []string
	Failures []string
}

// Held reports whether the expectation held.
func (r ExpectationResult) Held() bool { return len(r.Failures) == 0 }

// CheckEach checks every expectation on the pods' outcomes, in order:
// counted expectations take their pods, so a later one sees the rest.
func CheckEach(expect []Expectation, outcomes []PodOutcome, inv Inventory) []ExpectationResult {
	results := make([]ExpectationResult, 0, len(expect))
	taken := map[string]bool{}
	for _, e := range expect {
		res := ExpectationResult{Expected: Describe(e, inv)}
		fail := func(format string, args ...any) {
			res.Failures = append(res.Failures, fmt.Sprintf(format, args...))
		}
		var candidates []PodOutcome
		for _, o := range outcomes {
			if ok, _ := path.Match(e.Pods, o.Name); ok && (e.Count == nil || !taken[o.Name]) {
				candidates = append(candidates, o)
			}
		}
		n := len(candidates)
		if e.Count != nil {
			n = inv.Resolve(e.Count)
		}
		// Every matching pod of none is no outcome: a pattern with a typo,
		// or pods never created, must not pass for a check.
		if e.Count == nil && n == 0 {
			fail("no pod matches %s: an expectation without count holds for every matching pod and needs one (say count: 0 to expect none)", e.Pods)
			results = append(results, res)
			continue
		}
		// count: 0 asks that none match: one that does is a failure,
		// not an expectation that takes no pod.
		if e.Count != nil && e.Count.N != nil && *e.Count.N == 0 && len(candidates) > 0 {
			fail("expected no pod %s, found %d: %s", e.Pods, len(candidates), podNames(candidates))
			results = append(results, res)
			continue
		}
		if len(candidates) < n {
			fail("expected %d pods (%s), found %d: %s", n, e.Count.String(), len(candidates), podNames(candidates))
			results = append(results, res)
			continue
		}
		group := candidates[:n]
		if e.Last {
			group = candidates[len(candidates)-n:]
		}
		for _, o := range group {
			res.Pods = append(res.Pods, o.Name)
			if e.Count != nil {
				taken[o.Name] = true
			}
			for _, msg := range checkPod(e, o, inv) {
				fail("pod %s: %s", o.Name, msg)
			}
		}
		if e.SameDevice {
			refs := map[string]bool{}
			for _, o := range group {
				for _, d := range o.devices() {
					refs[d.DeviceRef()] = true
				}
			}
			if len(refs) != 1 {
				fail("expected one device shared by all pods, got %d: %v", len(refs), keys(refs))
			}
		}
		if e.TierCounts != nil {
			want, got := map[string]int{}, map[string]int{}
			for t, c := range e.TierCounts {
				want[t] = inv.Resolve(&c)
			}
			for _, o := range group {
				got[podTier(o)]++
			}
			if !equalCounts(want, got) {
				fail("pods per tier: expected %v, got %v", want, got)
			}
		}
		results = append(results, res)
	}
	return results
}

// Describe says in words what an expectation asks, its counts resolved
// on the inventory: "3 pods worker-* (devices of [h100]): phase Running,
// tier h100".
func Describe(e Expectation, inv Inventory) string {
	var who string
	switch {
	case e.Count == nil:
		who = "every pod " + e.Pods
	case e.Last:
		who = fmt.Sprintf("the last %s %s", pods(inv.Resolve(e.Count)), e.Pods)
	default:
		who = fmt.Sprintf("%s %s", pods(inv.Resolve(e.Count)), e.Pods)
	}
	if e.Count != nil && e.Count.N == nil {
		who += " (" + e.Count.String() + ")"
	}
	var what []string
	add := func(name, v string) {
		if v != "" {
			what = append(what, name+" "+v)
		}
	}
	add("phase", e.Phase)
	add("request", e.Request)
	add("subrequest", e.Subrequest)
	add("tier", e.Tier)
	add("MIG profile", e.Profile)
	add("device type", e.DeviceType)
	add("consuming", e.Consumed)
	add("node tier", e.NodeTier)
	if len(e.NodeLabels) > 0 {
		add("on a node labelled", labelList(e.NodeLabels))
	}
	if e.Devices != nil {
		add("devices", fmt.Sprint(inv.Resolve(e.Devices)))
	}
	add("every GPU of its node of tier", e.AllOfNode)
	add("same", e.SameAttribute)
	add("distinct", e.DistinctAttribute)
	if len(e.SameValueOf) > 0 {
		what = append(what, "one value of "+strings.Join(e.SameValueOf, " or "))
	}
	add("node operations", e.NodeOperations)
	for _, d := range slices.Sorted(maps.Keys(e.DriverDevices)) {
		what = append(what, fmt.Sprintf("%d of %s", e.DriverDevices[d], d))
	}
	if e.AdminAccess != nil {
		add("admin access", fmt.Sprint(*e.AdminAccess))
	}
	if e.ExtendedResourceClaim {
		what = append(what, "extended resource backed by a claim")
	}
	if e.Untainted {
		what = append(what, "untainted")
	}
	add("health", e.Health)
	if len(e.DeviceStatus) > 0 {
		add("device status", strings.Join(e.DeviceStatus, ", "))
	}
	if len(e.StatusData) > 0 {
		var kv []string
		for k, v := range e.StatusData {
			kv = append(kv, k+"="+v)
		}
		sort.Strings(kv)
		add("status data", strings.Join(kv, ", "))
	}
	if e.DeviceMetadata {
		what = append(what, "device metadata naming its devices")
	}
	for _, r := range slices.Sorted(maps.Keys(e.NodeAllocatable)) {
		what = append(what, fmt.Sprintf("%s %s through its devices", e.NodeAllocatable[r], r))
	}
	add("reason", e.Reason.String())
	if e.SameDevice {
		what = append(what, "all on one device")
	}
	if e.TierCounts != nil {
		var tc []string
		for t, c := range e.TierCounts {
			tc = append(tc, fmt.Sprintf("%s %d", t, inv.Resolve(&c)))
		}
		sort.Strings(tc)
		add("per tier", strings.Join(tc, ", "))
	}
	if len(what) == 0 {
		return who
	}
	return who + ": " + strings.Join(what, ", ")
}

func checkPod(e Expectation, o PodOutcome, inv Inventory) []string {
	var msgs []string
	mismatch := func(what string, want, got any, detail string) {
		m := fmt.Sprintf("%s: expected %v, got %v", what, want, got)
		if detail != "" {
			m += " (" + detail + ")"
		}
		msgs = append(msgs, m)
	}
	devs := o.devices()
	if e.Phase != "" && o.phase() != e.Phase {
		mismatch("phase", e.Phase, o.phase(), o.Rows[0].Reason)
	}
	for _, d := range devs {
		if e.Request != "" && d.Request != e.Request {
			mismatch("request", e.Request, d.Request, d.DeviceRef())
		}
		if e.Subrequest != "" && d.Subrequest != e.Subrequest {
			mismatch("chosen subrequest", e.Subrequest, orNone(d.Subrequest), d.DeviceRef())
		}
		if e.Tier != "" && d.Tier != e.Tier {
			mismatch("tier", e.Tier, orNone(d.Tier), d.DeviceRef()+" "+d.Product)
		}
		if e.Profile != "" && d.Profile != e.Profile {
			mismatch("MIG profile", e.Profile, orNone(d.Profile), d.DeviceRef())
		}
		if e.DeviceType != "" && d.DeviceType != e.DeviceType {
			mismatch("device type", e.DeviceType, orNone(d.DeviceType), d.DeviceRef())
		}
		if e.Consumed != "" && (d.ShareID == "" || !sameQuantity(d.Consumed, e.Consumed)) {
			mismatch("consumed capacity of a share", e.Consumed, orNone(d.Consumed)+" share "+orNone(d.ShareID), d.DeviceRef())
		}
		if e.AdminAccess != nil && d.AdminAccess != *e.AdminAccess {
			mismatch("admin access", *e.AdminAccess, d.AdminAccess, d.DeviceRef())
		}
		if e.ExtendedResourceClaim && !d.ExtendedResourceClaim {
			mismatch("claim backing the extended resource", "status.extendedResourceClaimStatus", "none", d.DeviceRef())
		}
		if e.Untainted && d.Tainted {
			mismatch("device taint", "untainted", strings.Join(d.Taints, ", "), d.DeviceRef())
		}
		if e.Health != "" && d.Health != e.Health {
			mismatch("device health in the pod's status", e.Health, orNone(d.Health), strings.TrimSpace(d.DeviceRef()+" "+d.HealthMessage))
		}
		if e.NodeOperations != "" {
			skipsPrepare := slices.Contains(d.SkipNodeOperations, "*") || slices.Contains(d.SkipNodeOperations, "NodePrepareResources")
			ready := slices.Contains(d.Conditions, "Ready")
			switch {
			case e.NodeOperations == NodeOperationsSkipped && (!skipsPrepare || len(d.Conditions) > 0):
				mismatch("node operations", "prepare skipped and no status from the driver", fmt.Sprintf("skipNodeOperations %v, status conditions %v", d.SkipNodeOperations, d.Conditions), d.DeviceRef())
			case e.NodeOperations == NodeOperationsPrepared && (skipsPrepare || !ready):
				mismatch("node operations", "prepared, and Ready in the claim's status", fmt.Sprintf("skipNodeOperations %v, status conditions %v", d.SkipNodeOperations, d.Conditions), d.DeviceRef())
			}
		}
		for _, c := range e.DeviceStatus {
			if !slices.Contains(d.Conditions, c) {
				mismatch("condition in the claim's device status", c+" True", orNone(strings.Join(d.Conditions, ", ")), d.DeviceRef())
			}
		}
		for k, v := range e.StatusData {
			if d.Data[k] != v {
				mismatch("data in the claim's device status: "+k, v, orNone(d.Data[k]), d.DeviceRef())
			}
		}
	}
	if (e.Request != "" || e.Subrequest != "" || e.Tier != "" || e.Profile != "" || e.DeviceType != "" || e.Consumed != "" || e.ExtendedResourceClaim || e.AdminAccess != nil || e.Health != "" || len(e.DeviceStatus) > 0 || len(e.StatusData) > 0 || e.NodeOperations != "") && len(devs) == 0 && e.Phase != "Pending" {
		mismatch("allocated devices", "at least one", 0, o.Rows[0].Reason)
	}
	if e.Devices != nil && len(devs) != inv.Resolve(e.Devices) {
		mismatch("allocated devices", inv.Resolve(e.Devices), len(devs), refs(devs))
	}
	if e.AllOfNode != "" {
		node := o.Rows[0].Node
		if want := inv.Published[e.AllOfNode][node]; len(devs) != want {
			mismatch(fmt.Sprintf("allocated devices: every %s GPU of node %s", e.AllOfNode, orNone(node)), want, len(devs), refs(devs))
		}
	}
	// sameValue: every device has one of the attributes, and all have
	// one value.
	sameValue := func(names []string) {
		what := strings.Join(names, " or ")
		values := map[string]bool{}
		for _, d := range devs {
			found := false
			for _, name := range names {
				if v, ok := d.Attribute(name); ok {
					values[v], found = true, true
					break
				}
			}
			if !found {
				mismatch(what, "an attribute of every device", "none", d.DeviceRef())
			}
		}
		if len(values) > 1 {
			mismatch(what, "one value for all devices", keys(values), refs(devs))
		}
	}
	if e.SameAttribute != "" && len(devs) > 0 {
		sameValue([]string{e.SameAttribute})
	}
	if len(e.DriverDevices) > 0 {
		got := map[string]int{}
		for _, d := range devs {
			got[d.Driver]++
		}
		// Compared as counts: a driver asked for 0 times is one the
		// pod got nothing of, whether or not it appears at all.
		if !equalCounts(e.DriverDevices, got) {
			mismatch("devices by driver", e.DriverDevices, got, refs(devs))
		}
	}
	if len(e.SameValueOf) > 0 && len(devs) > 0 {
		sameValue(e.SameValueOf)
	}
	if e.DistinctAttribute != "" && len(devs) > 0 {
		seen := map[string]string{}
		for _, d := range devs {
			v, ok := d.Attribute(e.DistinctAttribute)
			if !ok {
				mismatch(e.DistinctAttribute, "an attribute of every device", "none", d.DeviceRef())
				continue
			}
			if other, dup := seen[v]; dup {
				mismatch(e.DistinctAttribute, "a value of its own for each device", v+" for both "+other+" and "+d.DeviceRef(), refs(devs))
			}
			seen[v] = d.DeviceRef()
		}
	}
	if len(e.NodeLabels) > 0 {
		node := o.Rows[0].Node
		for _, k := range slices.Sorted(maps.Keys(e.NodeLabels)) {
			if got, ok := inv.NodeLabelsOf[node][k]; node == "" || !ok || got != e.NodeLabels[k] {
				mismatch("label "+k+" of the pod's node", e.NodeLabels[k], orNone(got), "node "+orNone(node))
			}
		}
	}
	if e.NodeTier != "" && o.Rows[0].NodeTier != e.NodeTier {
		mismatch("tier of the node's GPUs", e.NodeTier, orNone(o.Rows[0].NodeTier), "node "+orNone(o.Rows[0].Node))
	}
	if e.DeviceMetadata {
		checkMetadata(o.Rows[0].Metadata, devs, mismatch)
	}
	if len(e.NodeAllocatable) > 0 {
		// Compared as amounts: a resource asked for as "0" is one the
		// devices add none of, whether or not the status names it; one
		// the expectation leaves out must be accounted none.
		got := o.Rows[0].NodeAllocatable
		same := true
		for r, want := range e.NodeAllocatable {
			q := got[v1.ResourceName(r)]
			same = same && sameQuantity(q.String(), want)
		}
		for r, q := range got {
			if _, asked := e.NodeAllocatable[string(r)]; !asked {
				same = same && q.IsZero()
			}
		}
		if !same {
			mismatch("node resources accounted through its devices (status.nodeAllocatableResourceClaimStatuses)", e.NodeAllocatable, resourceList(got), "pod "+o.Rows[0].Pod)
		}
	}
	if len(e.Reason) > 0 && !slices.Contains(e.Reason, o.Rows[0].ReasonCode) {
		mismatch("pending reason", e.Reason.String(), orNone(o.Rows[0].ReasonCode), o.Rows[0].Reason)
	}
	return msgs
}

// labelList writes labels as key=value, sorted, comma-separated.
func labelList(labels map[string]string) string {
	var kv []string
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		kv = append(kv, k+"="+labels[k])
	}
	return strings.Join(kv, ", ")
}

// sameQuantity compares two quantities by value (7Gi and 7168Mi are the
// same); an unparsable one is never the same.
func sameQuantity(a, b string) bool {
	qa, errA := resource.ParseQuantity(a)
	qb, errB := resource.ParseQuantity(b)
	return errA == nil && errB == nil && qa.Cmp(qb) == 0
}

// podTier is the tier of a pod's devices, or of its node's GPUs when it
// has no device, or "none".
func podTier(o PodOutcome) string {
	if devs := o.devices(); len(devs) > 0 && devs[0].Tier != "" {
		return devs[0].Tier
	}
	if t := o.Rows[0].NodeTier; t != "" && o.Rows[0].Node != "" {
		return t
	}
	return "none"
}

func equalCounts(want, got map[string]int) bool {
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	for k, v := range got {
		if want[k] != v {
			return false
		}
	}
	return true
}

func pods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

func podNames(os []PodOutcome) string {
	var names []string
	for _, o := range os {
		names = append(names, o.Name)
	}
	return "[" + strings.Join(names, " ") + "]"
}

func refs(rows []allocation.Row) string {
	var out []string
	for _, r := range rows {
		out = append(out, r.DeviceRef())
	}
	return strings.Join(out, ", ")
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// resourceList prints a resource list as a scenario writes one.
func resourceList(l v1.ResourceList) map[string]string {
	out := map[string]string{}
	for r, q := range l {
		out[string(r)] = q.String()
	}
	return out
}

// checkMetadata: the device metadata files a pod's container found name
// exactly its allocated devices, each under its request (a prioritized
// list's subrequest counts as its request), with its slice's attributes.
func checkMetadata(found []allocation.MetadataDevice, devs []allocation.Row, mismatch func(what string, want, got any, where string)) {
	if len(devs) == 0 {
		mismatch("device metadata", "allocated devices to compare with", "none", "")
		return
	}
	byRef := map[string]allocation.MetadataDevice{}
	var refs []string
	for _, m := range found {
		byRef[m.Ref()] = m
		refs = append(refs, m.Request+": "+m.Ref())
	}
	for _, d := range devs {
		ref := d.DeviceRef()
		m, ok := byRef[ref]
		switch {
		case !ok:
			mismatch("device metadata", "a file naming "+ref, orNone(strings.Join(refs, ", ")), "request "+d.Request)
		case m.Request != d.Request && m.Request != d.Request+"/"+d.Subrequest:
			mismatch("device metadata of "+ref, "request "+d.Request, "request "+m.Request, m.Path)
		case !m.SameAsSlice:
			mismatch("device metadata of "+ref, "the attributes its ResourceSlice publishes", fmt.Sprintf("%d attributes, not those", m.Attributes), m.Path)
		}
		delete(byRef, ref)
	}
	for _, m := range byRef {
		mismatch("device metadata", "only the pod's devices", m.Ref()+" too", m.Path)
	}
}
