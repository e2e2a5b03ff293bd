package scenarios

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dralab/dralab/drivers/conformance/strictyaml"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/lab/examples"
)

// nodeResources are the node resources a device may account
// (nodeAllocatableResources): Node status.allocatable's, extended
// resources excepted.
var nodeResources = []string{"cpu", "memory", "ephemeral-storage", "hugepages-2Mi", "hugepages-1Gi"}

// deviceTypes are the types of dralab's GPU driver's devices.
var deviceTypes = []string{gpu.TypeGPU, gpu.TypeMIG, gpu.TypeTimeSlice}

// healths are the health values the kubelet reports for a device.
var healths = []string{"Healthy", "Unhealthy", "Unknown"}

var reasons = []string{ReasonNoMatchingDevice, ReasonAllAllocated, ReasonTainted, ReasonInsufficient, ReasonCounterExhausted, ReasonCapacityExhausted, ReasonSelectorError, ReasonConstraintUnmet,
	ReasonNotOnOneNode, ReasonIncompatibleGroups, ReasonNodeResources, ReasonNotRetried, ReasonNodeTaint, ReasonGangIncomplete, ReasonGangShort, ReasonTopologyShort, ReasonGangUnschedulable}

// Parse decodes a scenario.yaml strictly and validates it; source names
// the file in errors. files lists the scenario folder's files, which
// references must name.
func Parse(source string, data []byte, files []string) (*Scenario, error) {
	wrap := func(err error) error { return fmt.Errorf("%w %s: %w", ErrInvalid, source, err) }
	var s Scenario
	if err := strictyaml.Decode(data, &s); err != nil {
		return nil, wrap(err)
	}
	if errs := s.validate(files); len(errs) > 0 {
		return nil, wrap(errs.ToAggregate())
	}
	return &s, nil
}

func tierNames() []string {
	var names []string
	for _, t := range gpu.Tiers {
		names = append(names, t.Name)
	}
	return names
}

func (s *Scenario) validate(files []string) field.ErrorList {
	var errs field.ErrorList
	if s.Lab != "" {
		labs := exampleLabs()
		if !slices.Contains(labs, s.Lab) {
			errs = append(errs, field.NotSupported(field.NewPath("lab"), s.Lab, labs))
		}
	}
	tiers := tierNames()
	checkTiers := func(p *field.Path, list []string) {
		for i, t := range list {
			if !slices.Contains(tiers, t) {
				errs = append(errs, field.NotSupported(p.Index(i), t, tiers))
			}
		}
	}
	checkTier := func(p *field.Path, t string) {
		if t != "" && !slices.Contains(tiers, t) {
			errs = append(errs, field.NotSupported(p, t, tiers))
		}
	}
	checkCount := func(p *field.Path, c *Count) {
		if c == nil {
			return
		}
		if c.N != nil && *c.N < 0 {
			errs = append(errs, field.Invalid(p, *c.N, "must not be negative"))
		}
		if c.N == nil && len(c.DevicesOf) == 0 && len(c.CountedOf) == 0 && len(c.CountedNodesOf) == 0 && len(c.PartitionsOf) == 0 && len(c.PartitionedOf) == 0 && c.SharesOf == nil && c.GroupsOf == nil && c.PairsOf == nil && c.NodesOf == nil {
			errs = append(errs, field.Required(p, "a number, or devicesOf/countedOf/countedNodesOf/partitionsOf/partitionedOf/sharesOf/groupsOf/pairsOf/nodesOf"))
		}
		if pr := c.PairsOf; pr != nil {
			checkTier(p.Child("pairsOf", "tier"), pr.Tier)
			errs = append(errs, validPairs(p.Child("pairsOf"), pr)...)
		}
		if n := c.NodesOf; n != nil {
			np := p.Child("nodesOf")
			errs = append(errs, validClass(np.Child("class"), n.Class)...)
			errs = append(errs, validAttribute(np.Child("attribute"), n.Attribute)...)
			if n.Value == "" {
				errs = append(errs, field.Required(np.Child("value"), "the attribute's value, e.g. \"0\""))
			}
		}
		checkTiers(p.Child("partitionedOf"), c.PartitionedOf)
		if g := c.GroupsOf; g != nil {
			gp := p.Child("groupsOf")
			if g.Tier == "" {
				errs = append(errs, field.Required(gp.Child("tier"), ""))
			}
			checkTier(gp.Child("tier"), g.Tier)
			if g.Size < 1 {
				errs = append(errs, field.Invalid(gp.Child("size"), g.Size, "how many GPUs a group holds, at least 1"))
			}
			if g.Attribute == "" {
				errs = append(errs, field.Required(gp.Child("attribute"), "the attribute the GPUs of a group share, e.g. resource.kubernetes.io/pcieRoot"))
			}
		}
		if sh := c.SharesOf; sh != nil {
			if sh.Tier == "" {
				errs = append(errs, field.Required(p.Child("sharesOf", "tier"), ""))
			}
			checkTier(p.Child("sharesOf", "tier"), sh.Tier)
			if q, err := resource.ParseQuantity(sh.Memory); err != nil || q.Sign() <= 0 {
				errs = append(errs, field.Invalid(p.Child("sharesOf", "memory"), sh.Memory, "a positive quantity, e.g. 7Gi"))
			}
		}
		for i, profile := range c.PartitionsOf {
			if profile == "" {
				errs = append(errs, field.Required(p.Child("partitionsOf").Index(i), "a MIG profile, e.g. 1g.10gb"))
			}
		}
		if c.DivideBy < 0 {
			errs = append(errs, field.Invalid(p.Child("divideBy"), c.DivideBy, "must not be negative"))
		}
		checkTiers(p.Child("devicesOf"), c.DevicesOf)
		checkTiers(p.Child("countedOf"), c.CountedOf)
		checkTiers(p.Child("countedNodesOf"), c.CountedNodesOf)
	}
	checkFile := func(p *field.Path, f string) {
		if !slices.Contains(files, f) {
			errs = append(errs, field.NotFound(p, f))
		}
	}
	checkPattern := func(p *field.Path, pattern string) {
		if pattern == "" {
			errs = append(errs, field.Required(p, "a pod name or pattern, e.g. worker-*"))
		} else if _, err := path.Match(pattern, ""); err != nil {
			errs = append(errs, field.Invalid(p, pattern, err.Error()))
		}
	}

	if s.APIVersion != APIVersion {
		errs = append(errs, field.NotSupported(field.NewPath("apiVersion"), s.APIVersion, []string{APIVersion}))
	}
	if s.Kind != Kind {
		errs = append(errs, field.NotSupported(field.NewPath("kind"), s.Kind, []string{Kind}))
	}
	for name, v := range map[string]string{"name": s.Name, "title": s.Title, "summary": s.Summary} {
		if v == "" {
			errs = append(errs, field.Required(field.NewPath(name), ""))
		}
	}
	checkTiers(field.NewPath("requires", "tiers"), s.Requires.Tiers)
	checkTiers(field.NewPath("requires", "countedTiers"), s.Requires.CountedTiers)
	checkTiers(field.NewPath("requires", "partitionedTiers"), s.Requires.PartitionedTiers)
	checkTiers(field.NewPath("requires", "sharedTiers"), s.Requires.SharedTiers)
	checkTiers(field.NewPath("requires", "attachedTiers"), s.Requires.AttachedTiers)
	checkTiers(field.NewPath("requires", "plainTiers"), s.Requires.PlainTiers)
	checkTiers(field.NewPath("requires", "overheadTiers"), s.Requires.OverheadTiers)
	checkTiers(field.NewPath("requires", "timeSlicedTiers"), s.Requires.TimeSlicedTiers)
	checkTiers(field.NewPath("requires", "untaintedTiers"), s.Requires.UntaintedTiers)
	for i, n := range s.Requires.Nodes {
		np := field.NewPath("requires", "nodes").Index(i)
		checkTier(np.Child("tier"), n.Tier)
		if n.Tier == "" {
			errs = append(errs, field.Required(np.Child("tier"), ""))
		}
		if n.Devices < 1 {
			errs = append(errs, field.Invalid(np.Child("devices"), n.Devices, "how many free GPUs one node needs, at least 1"))
		}
		if n.Count < 0 {
			errs = append(errs, field.Invalid(np.Child("count"), n.Count, "must not be negative"))
		}
	}
	if d := s.Requires.Domains; d != nil {
		dp := field.NewPath("requires", "domains")
		checkTier(dp.Child("tier"), d.Tier)
		for _, msg := range validation.IsQualifiedName(d.Label) {
			errs = append(errs, field.Invalid(dp.Child("label"), d.Label, "a node label: "+msg))
		}
		if d.Tier == "" {
			errs = append(errs, field.Required(dp.Child("tier"), ""))
		}
		if d.Count < 1 || d.Devices < 1 {
			errs = append(errs, field.Invalid(dp, fmt.Sprintf("count %d, devices %d", d.Count, d.Devices), "count and devices are at least 1"))
		}
	}
	for i, taint := range s.Requires.NodeTaints {
		tp := field.NewPath("requires", "nodeTaints").Index(i)
		spec, effect, ok := strings.Cut(taint, ":")
		k, v, _ := strings.Cut(spec, "=")
		if !ok || !slices.Contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, effect) {
			errs = append(errs, field.Invalid(tp, taint, "want key=value:Effect (or key:Effect), the effect NoSchedule, PreferNoSchedule or NoExecute, e.g. nvidia.com/gpu=present:NoSchedule"))
			continue
		}
		errs = append(errs, keyValueErrs(tp, taint, k, v)...)
	}
	for i, l := range s.Requires.NodeLabels {
		lp := field.NewPath("requires", "nodeLabels").Index(i)
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			errs = append(errs, field.Invalid(lp, l, "want key=value, e.g. gpu.dralab.dev/device-metadata=true"))
			continue
		}
		errs = append(errs, keyValueErrs(lp, l, k, v)...)
	}
	for i, d := range s.Requires.Drivers {
		errs = append(errs, validDriver(field.NewPath("requires", "drivers").Index(i), d)...)
	}
	for i, pr := range s.Requires.Pairs {
		checkTier(field.NewPath("requires", "pairs").Index(i).Child("tier"), pr.Tier)
		errs = append(errs, validPairs(field.NewPath("requires", "pairs").Index(i), &pr.Pairs)...)
	}
	for i, r := range s.Requires.Resources {
		if _, err := ParseResource(r); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("requires", "resources").Index(i), r, err.Error()))
		}
	}
	for _, tier := range slices.Sorted(maps.Keys(s.Requires.Devices)) {
		p := field.NewPath("requires", "devices").Key(tier)
		checkTier(p, tier)
		if n := s.Requires.Devices[tier]; n < 1 {
			errs = append(errs, field.Invalid(p, n, "how many free GPUs of the tier the scenario needs, at least 1"))
		}
	}
	if len(s.Steps) == 0 {
		errs = append(errs, field.Required(field.NewPath("steps"), ""))
	}
	for i, st := range s.Steps {
		p := field.NewPath("steps").Index(i)
		if st.Name == "" {
			errs = append(errs, field.Required(p.Child("name"), ""))
		}
		actions := 0
		for j, f := range st.Apply {
			checkFile(p.Child("apply").Index(j), f)
		}
		if len(st.Apply) > 0 {
			actions++
		}
		if c := st.CreatePods; c != nil {
			actions++
			cp := p.Child("createPods")
			switch {
			case c.Manifest == "" && len(c.Manifests) == 0:
				errs = append(errs, field.Required(cp.Child("manifest"), "a pod manifest (or manifests, a list)"))
			case c.Manifest != "" && len(c.Manifests) > 0:
				errs = append(errs, field.Invalid(cp.Child("manifests"), c.Manifests, "give manifest or manifests, not both"))
			case c.Manifest != "":
				checkFile(cp.Child("manifest"), c.Manifest)
			}
			seen := map[string]bool{}
			for j, f := range c.Manifests {
				checkFile(cp.Child("manifests").Index(j), f)
				if seen[f] {
					errs = append(errs, field.Duplicate(cp.Child("manifests").Index(j), f))
				}
				seen[f] = true
			}
			if c.Group != "" {
				checkFile(cp.Child("group"), c.Group)
			}
			checkCount(cp.Child("replicas"), &c.Replicas)
		}
		if d := st.DeletePods; d != nil {
			actions++
			checkPattern(p.Child("deletePods", "pods"), d.Pods)
			checkTier(p.Child("deletePods", "tier"), d.Tier)
			if d.Phase != "" && d.Phase != "Running" && d.Phase != "Pending" {
				errs = append(errs, field.NotSupported(p.Child("deletePods", "phase"), d.Phase, []string{"Running", "Pending"}))
			}
			checkCount(p.Child("deletePods", "count"), d.Count)
		}
		if d := st.DeleteGroups; d != nil {
			actions++
			checkPattern(p.Child("deleteGroups", "groups"), d.Groups)
		}
		if ta := st.TaintAllocated; ta != nil {
			actions++
			checkPattern(p.Child("taintAllocated", "pods"), ta.Pods)
			if ta.Key == "" {
				errs = append(errs, field.Required(p.Child("taintAllocated", "key"), ""))
			}
			if ta.Effect != "NoSchedule" && ta.Effect != "NoExecute" && ta.Effect != "None" {
				errs = append(errs, field.NotSupported(p.Child("taintAllocated", "effect"), ta.Effect, []string{"NoSchedule", "NoExecute", "None"}))
			}
		}
		if f := st.FailGPU; f != nil {
			actions++
			checkPattern(p.Child("failGPU", "pods"), f.Pods)
			if f.XID < 0 {
				errs = append(errs, field.Invalid(p.Child("failGPU", "xid"), f.XID, "an XID is positive (79: the GPU has fallen off the bus)"))
			}
		}
		if st.HealGPU != nil {
			actions++
		}
		switch {
		case actions > 1:
			errs = append(errs, field.Invalid(p, st.Name, "a step has at most one action: apply, createPods, deletePods, deleteGroups, taintAllocated, failGPU or healGPU"))
		case actions == 0 && len(st.Expect) == 0 && len(st.ExpectGroups) == 0:
			errs = append(errs, field.Required(p, "a step needs an action or expectations, which it then waits for"))
		}
		for j, g := range st.ExpectGroups {
			errs = append(errs, g.validate(p.Child("expectGroups").Index(j), checkPattern, checkCount)...)
		}
		if st.HoldsFor != "" {
			hp := p.Child("holdsFor")
			d, err := time.ParseDuration(st.HoldsFor)
			switch {
			case err != nil:
				errs = append(errs, field.Invalid(hp, st.HoldsFor, "a duration, e.g. 15s"))
			case d <= SchedulerMaxBackoff || d > 2*time.Minute:
				errs = append(errs, field.Invalid(hp, st.HoldsFor, fmt.Sprintf("more than the scheduler's maximum backoff (%s), so that a retry it had due would have come, and at most 2m", SchedulerMaxBackoff)))
			case len(st.Expect) == 0 && len(st.ExpectGroups) == 0:
				errs = append(errs, field.Required(p.Child("expect"), "holdsFor needs expectations to hold"))
			}
		}
		for j, e := range st.Expect {
			ep := p.Child("expect").Index(j)
			checkPattern(ep.Child("pods"), e.Pods)
			checkCount(ep.Child("count"), e.Count)
			checkCount(ep.Child("devices"), e.Devices)
			checkTier(ep.Child("tier"), e.Tier)
			checkTier(ep.Child("nodeTier"), e.NodeTier)
			for k, v := range e.NodeLabels {
				lp := ep.Child("nodeLabels").Key(k)
				for _, msg := range validation.IsQualifiedName(k) {
					errs = append(errs, field.Invalid(lp, k, msg))
				}
				for _, msg := range validation.IsValidLabelValue(v) {
					errs = append(errs, field.Invalid(lp, v, msg))
				}
			}
			checkTier(ep.Child("allOfNode"), e.AllOfNode)
			if e.Consumed != "" {
				if _, err := resource.ParseQuantity(e.Consumed); err != nil {
					errs = append(errs, field.Invalid(ep.Child("consumed"), e.Consumed, "a quantity, e.g. 7Gi"))
				}
			}
			for _, d := range slices.Sorted(maps.Keys(e.DriverDevices)) {
				dp := ep.Child("driverDevices").Key(d)
				if msgs := validation.IsDNS1123Subdomain(d); len(msgs) > 0 || !strings.Contains(d, ".") {
					errs = append(errs, field.Invalid(dp, d, "a driver's name, a DNS subdomain such as nic.dralab.dev"))
				}
				if e.DriverDevices[d] < 0 {
					errs = append(errs, field.Invalid(dp, e.DriverDevices[d], "must not be negative"))
				}
			}
			for _, r := range slices.Sorted(maps.Keys(e.NodeAllocatable)) {
				rp := ep.Child("nodeAllocatable").Key(r)
				if !slices.Contains(nodeResources, r) {
					errs = append(errs, field.NotSupported(rp, r, nodeResources))
				}
				if q, err := resource.ParseQuantity(e.NodeAllocatable[r]); err != nil || q.Sign() < 0 {
					errs = append(errs, field.Invalid(rp, e.NodeAllocatable[r], "a quantity, e.g. 8Gi"))
				}
			}
			for t, c := range e.TierCounts {
				checkTier(ep.Child("tierCounts").Key(t), t)
				checkCount(ep.Child("tierCounts").Key(t), &c)
			}
			if op := e.NodeOperations; op != "" && op != NodeOperationsSkipped && op != NodeOperationsPrepared {
				errs = append(errs, field.NotSupported(ep.Child("nodeOperations"), op, []string{NodeOperationsSkipped, NodeOperationsPrepared}))
			}
			if t := e.DeviceType; t != "" && !slices.Contains(deviceTypes, t) {
				errs = append(errs, field.NotSupported(ep.Child("deviceType"), t, deviceTypes))
			}
			if h := e.Health; h != "" && !slices.Contains(healths, h) {
				errs = append(errs, field.NotSupported(ep.Child("health"), h, healths))
			}
			if e.Phase != "" && e.Phase != "Running" && e.Phase != "Pending" {
				errs = append(errs, field.NotSupported(ep.Child("phase"), e.Phase, []string{"Running", "Pending"}))
			}
			if len(e.Reason) > 0 {
				for _, r := range e.Reason {
					if !slices.Contains(reasons, r) {
						errs = append(errs, field.NotSupported(ep.Child("reason"), r, reasons))
					}
				}
				if e.Phase != "Pending" {
					errs = append(errs, field.Invalid(ep.Child("reason"), e.Reason.String(), "a reason needs phase: Pending"))
				}
			}
		}
	}
	return errs
}

func (g GroupExpectation) validate(p *field.Path, checkPattern func(*field.Path, string), checkCount func(*field.Path, *Count)) field.ErrorList {
	var errs field.ErrorList
	checkPattern(p.Child("groups"), g.Groups)
	checkCount(p.Child("count"), g.Count)
	switch g.Bound {
	case "", BoundAll, BoundNone, BoundSome:
	default:
		errs = append(errs, field.NotSupported(p.Child("bound"), g.Bound, []string{BoundAll, BoundNone, BoundSome}))
	}
	if g.Reason != "" && (g.Scheduled == nil || *g.Scheduled) {
		errs = append(errs, field.Invalid(p.Child("reason"), g.Reason, "a reason needs scheduled: false"))
	}
	for i, c := range g.Claims {
		for _, msg := range validation.IsDNS1123Label(c) {
			errs = append(errs, field.Invalid(p.Child("claims").Index(i), c, "the name of an entry of the group's spec.resourceClaims: "+msg))
		}
	}
	if g.SameDomain != "" {
		for _, msg := range validation.IsQualifiedName(g.SameDomain) {
			errs = append(errs, field.Invalid(p.Child("sameDomain"), g.SameDomain, "a node label: "+msg))
		}
	}
	if g.Gone && (g.Count != nil || g.Bound != "" || g.Scheduled != nil || len(g.Claims) > 0 || g.SameDomain != "") {
		errs = append(errs, field.Invalid(p.Child("gone"), g.Gone, "a group that is gone has nothing else to check"))
	}
	if !g.Gone && g.Bound == "" && g.Scheduled == nil && len(g.Claims) == 0 && g.SameDomain == "" {
		errs = append(errs, field.Required(p, "something to check: bound, scheduled, claims, sameDomain or gone"))
	}
	return errs
}

// ParseResource splits "podgroups.scheduling.k8s.io/v1beta1" (or "pods/v1",
// the core group) into a GroupVersionResource.
func ParseResource(s string) (schema.GroupVersionResource, error) {
	rg, version, ok := strings.Cut(s, "/")
	if !ok || version == "" || rg == "" {
		return schema.GroupVersionResource{}, errors.New("want resource.group/version, e.g. podgroups.scheduling.k8s.io/v1beta1")
	}
	resource, group, _ := strings.Cut(rg, ".")
	return schema.GroupVersionResource{Group: group, Version: version, Resource: resource}, nil
}

// validPairs checks a count or requirement of pairs.
func validPairs(p *field.Path, pr *Pairs) field.ErrorList {
	var errs field.ErrorList
	if pr.Tier == "" {
		errs = append(errs, field.Required(p.Child("tier"), ""))
	}
	errs = append(errs, validClass(p.Child("class"), pr.Class)...)
	errs = append(errs, validAttribute(p.Child("attribute"), pr.Attribute)...)
	if pr.ClassAttribute != "" {
		errs = append(errs, validAttribute(p.Child("classAttribute"), pr.ClassAttribute)...)
	}
	return errs
}

// validDriver checks a driver's name.
func validDriver(p *field.Path, d string) field.ErrorList {
	if msgs := validation.IsDNS1123Subdomain(d); len(msgs) > 0 || !strings.Contains(d, ".") {
		return field.ErrorList{field.Invalid(p, d, "a driver's name, a DNS subdomain such as nic.dralab.dev")}
	}
	return nil
}

// validClass checks a DeviceClass's name.
func validClass(p *field.Path, c string) field.ErrorList {
	if c == "" {
		return field.ErrorList{field.Required(p, "a DeviceClass, e.g. rdma.nic.dralab.dev")}
	}
	if msgs := validation.IsDNS1123Subdomain(c); len(msgs) > 0 {
		return field.ErrorList{field.Invalid(p, c, "a DeviceClass's name: "+strings.Join(msgs, "; "))}
	}
	return nil
}

// validAttribute checks a qualified attribute name, domain/name.
func validAttribute(p *field.Path, a string) field.ErrorList {
	domain, name, ok := strings.Cut(a, "/")
	if !ok || len(validation.IsDNS1123Subdomain(domain)) > 0 || name == "" || len(validation.IsCIdentifier(name)) > 0 {
		return field.ErrorList{field.Invalid(p, a, "a qualified attribute name, domain/name, e.g. resource.kubernetes.io/pcieRoot")}
	}
	return nil
}

// exampleLabs are the example labs a scenario may be written for, by
// name: lab/examples' files without ".yaml".
func exampleLabs() []string {
	var labs []string
	files, _ := fs.Glob(examples.FS, "*.yaml") // a valid pattern
	for _, f := range files {
		labs = append(labs, strings.TrimSuffix(f, ".yaml"))
	}
	return labs
}

// keyValueErrs checks a label's or taint's key and value, as written
// (whole) at p.
func keyValueErrs(p *field.Path, whole, key, value string) field.ErrorList {
	var errs field.ErrorList
	for _, msg := range validation.IsQualifiedName(key) {
		errs = append(errs, field.Invalid(p, whole, msg))
	}
	for _, msg := range validation.IsValidLabelValue(value) {
		errs = append(errs, field.Invalid(p, whole, msg))
	}
	return errs
}
