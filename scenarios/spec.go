// Package scenarios holds dralab's scenarios, one folder each: a README (the
// story), the manifests, and scenario.yaml, which says what the scenario
// needs and what must happen. The built-in folders are embedded in the
// binary; docs, mage and the e2e suite all read the same files. Load and
// LoadDir read scenarios of the same format from elsewhere (a workshop's
// folder, named by DRALAB_SCENARIOS). The Runner applies a scenario to a
// cluster and compares what happened with what it expects.
package scenarios

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	sigsjson "sigs.k8s.io/json"

	"github.com/dralab/dralab/lab/examples"
)

// Scenario file identity.
const (
	APIVersion = "scenarios.dralab.dev/v1alpha1"
	Kind       = "Scenario"
)

// ErrInvalid wraps every error of a scenario file.
var ErrInvalid = errors.New("invalid scenario")

// Scenario is a scenario.yaml.
type Scenario struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Name is the scenario's folder name.
	Name string `json:"name"`
	// Title is a one-line headline; Summary says what it shows.
	Title   string `json:"title"`
	Summary string `json:"summary"`
	// Labels select scenarios in the e2e suite, e.g. tier: fast.
	Labels map[string]string `json:"labels,omitempty"`
	// Lab names the example lab the scenario is written for: a file of
	// lab/examples without ".yaml" ("frontier"); empty, the default lab.
	// The e2e suite runs the scenario there, and an unmet run names it.
	Lab string `json:"lab,omitempty"`
	// Requires is what the cluster must offer.
	Requires Requirements `json:"requires"`
	// NamespaceLabels label the scenario's namespace.
	NamespaceLabels map[string]string `json:"namespaceLabels,omitempty"`
	Steps           []Step            `json:"steps"`

	// fsys holds the scenario's folder, dir; prefix is how messages name
	// fsys's root ("scenarios" for the built-in ones, a path on disk).
	fsys   fs.FS
	dir    string
	prefix string
}

// Requirements are what a scenario needs from the cluster.
type Requirements struct {
	// Tiers must have GPUs published through DRA.
	Tiers []string `json:"tiers,omitempty"`
	// Devices are how many free GPUs of a tier, published through DRA, the
	// scenario needs at least, by tier: {h100: 2} for a replacement that
	// gets another H100.
	Devices map[string]int `json:"devices,omitempty"`
	// CountedTiers must have GPUs counted through the device-plugin API.
	CountedTiers []string `json:"countedTiers,omitempty"`
	// PartitionedTiers must have free GPUs published with partitions that
	// consume their counters (MIG); SharedTiers free GPUs that several
	// claims may share (allowMultipleAllocations).
	PartitionedTiers []string `json:"partitionedTiers,omitempty"`
	SharedTiers      []string `json:"sharedTiers,omitempty"`
	// PlainTiers must have free GPUs that are neither partitioned, shared
	// nor fabric-attached: admin access to a GPU whose counters another
	// claim holds is refused, as the allocator checks counters for it too.
	PlainTiers []string `json:"plainTiers,omitempty"`
	// AttachedTiers must have free GPUs that are fabric-attached: they
	// publish binding conditions, which the lab's attach controller sets
	// (attach: fabric).
	AttachedTiers []string `json:"attachedTiers,omitempty"`
	// Drivers must publish devices, beside the GPU driver:
	// [nic.dralab.dev] for a scenario that pairs GPUs with NICs.
	Drivers []string `json:"drivers,omitempty"`
	// NodeLabels must each be on some node, as key=value:
	// gpu.dralab.dev/device-metadata=true for a scenario that reads the
	// device metadata files of the GPU driver, which labels the nodes
	// where it writes them (gpus.deviceMetadata in a lab configuration).
	NodeLabels []string `json:"nodeLabels,omitempty"`
	// NodeTaints must each be on some node, as kubectl writes a taint
	// (key=value:Effect, key:Effect without a value): a cloud GPU node
	// pool's nvidia.com/gpu=present:NoSchedule (lab/examples/cloud.yaml).
	NodeTaints []string `json:"nodeTaints,omitempty"`
	// TimeSlicedTiers must have exactly one free GPU that offers MIG
	// devices and time-sliced shares on one counter set, which exclude
	// each other by their compatibility groups (partitioning: mig and
	// timeSlices, with the DRADeviceCompatibilityGroups gate): a claim
	// cannot name the GPU that another claim got.
	TimeSlicedTiers []string `json:"timeSlicedTiers,omitempty"`
	// OverheadTiers must have free GPUs that add node resources to a pod
	// (nodeAllocatableResources: a host-memory overhead), which needs the
	// DRANodeAllocatableResources gate (lab/examples/frontier.yaml).
	OverheadTiers []string `json:"overheadTiers,omitempty"`
	// Nodes are GPUs the scenario needs on one node, since a claim's
	// devices are all on one node: {tier: h100, devices: 3} for a claim
	// of three H100s; count: 2 for two such nodes.
	Nodes []NodeRequirement `json:"nodes,omitempty"`
	// Domains is the shape of the topology domains a scenario needs:
	// exactly Count domains of a node label with free GPUs of a tier,
	// each with exactly Devices (a gang that must fill one whole).
	Domains *DomainRequirement `json:"domains,omitempty"`
	// UntaintedTiers must have no tainted GPU: an All claim takes a
	// node's every device, and Kubernetes 1.37's device taint manager
	// evicts an admin-access pod from a NoExecute one, tolerated or not.
	UntaintedTiers []string `json:"untaintedTiers,omitempty"`
	// Pairs asks for pairs of a GPU and another driver's device that
	// agree on an attribute on one node.
	Pairs []PairRequirement `json:"pairs,omitempty"`
	// Features names the Kubernetes features the scenario exercises.
	Features []string `json:"features,omitempty"`
	// Resources the API server must serve, as resource.group/version:
	// podgroups.scheduling.k8s.io/v1beta1 for the Workload API, which is
	// off by default (lab/examples/workloads.yaml switches it on).
	Resources []string `json:"resources,omitempty"`
}

// PairRequirement asks for at least one pair of a free GPU and a free
// device of another driver whose attributes agree on one node and, with
// Spare, for more free GPUs of the tier than pairs: a pod that then
// waits, waits for its constraint, not for a GPU.
type PairRequirement struct {
	Pairs `json:",inline"`
	Spare bool `json:"spare,omitempty"`
}

// NodeRequirement asks for Count nodes (1 unless set) with at least
// Devices free DRA GPUs of Tier each.
type NodeRequirement struct {
	Tier    string `json:"tier"`
	Devices int    `json:"devices"`
	Count   int    `json:"count,omitempty"`
}

func (n NodeRequirement) count() int { return max(n.Count, 1) }

// DomainRequirement asks for exactly Count domains of the node label
// Label with free DRA GPUs of Tier, each with exactly Devices.
type DomainRequirement struct {
	Label   string `json:"label"`
	Tier    string `json:"tier"`
	Count   int    `json:"count"`
	Devices int    `json:"devices"`
}

// Step is one action and what must hold once the cluster has settled.
type Step struct {
	Name string `json:"name"`
	// Apply applies manifest files of the scenario's folder, in order.
	Apply []string `json:"apply,omitempty"`
	// CreatePods creates copies of a pod manifest one by one.
	CreatePods *CreatePods `json:"createPods,omitempty"`
	// DeletePods deletes pods.
	DeletePods *DeletePods `json:"deletePods,omitempty"`
	// TaintAllocated taints the devices allocated to some pods with a
	// DeviceTaintRule.
	TaintAllocated *TaintAllocated `json:"taintAllocated,omitempty"`
	// FailGPU fails the GPUs some pods hold, through their node's driver,
	// as gpu:fail does; HealGPU heals every GPU the scenario failed.
	FailGPU *FailGPU  `json:"failGPU,omitempty"`
	HealGPU *struct{} `json:"healGPU,omitempty"`
	// DeleteGroups deletes PodGroups and their pods.
	DeleteGroups *DeleteGroups `json:"deleteGroups,omitempty"`
	// Expect are checked in order against the namespace's pods.
	Expect []Expectation `json:"expect,omitempty"`
	// ExpectGroups are checked against the namespace's PodGroups.
	ExpectGroups []GroupExpectation `json:"expectGroups,omitempty"`
	// HoldsFor is how long the expectations must go on holding once they
	// first hold ("15s"), for an outcome that is the absence of a change
	// ("still waits"): longer than the scheduler's maximum backoff
	// (SchedulerMaxBackoff), so that a retry it had due would have come.
	// Anything that moves meanwhile fails the step at once.
	HoldsFor string `json:"holdsFor,omitempty"`
}

// SchedulerMaxBackoff is the longest a scheduler waits before it tries an
// unschedulable pod again after a failed attempt: Kubernetes' default
// podMaxBackoffSeconds, which the lab's scheduler keeps.
const SchedulerMaxBackoff = 10 * time.Second

// holdsFor is the step's HoldsFor, 0 when unset or invalid (validation
// says which).
func (st Step) holdsFor() time.Duration {
	d, _ := time.ParseDuration(st.HoldsFor)
	return d
}

// DeleteGroups deletes the PodGroups matching Groups (a name pattern) and
// every pod of them.
type DeleteGroups struct {
	Groups string `json:"groups"`
}

// GroupExpectation is what must hold for the PodGroups matching Groups (a
// name pattern): with Count, exactly that many of them meet every field
// set; without, each of them does, and at least one matches.
type GroupExpectation struct {
	Groups string `json:"groups"`
	Count  *Count `json:"count,omitempty"`
	// Bound is how many of each group's pods the scheduler bound: "all",
	// "none" or "some" (some, not all); a group without pods is none of
	// these.
	Bound string `json:"bound,omitempty"`
	// Scheduled is the group's PodGroupInitiallyScheduled condition: true,
	// or false (not yet, or with Reason: Unschedulable).
	Scheduled *bool  `json:"scheduled,omitempty"`
	Reason    string `json:"reason,omitempty"`
	// Claims name entries of the group's spec.resourceClaims: each has one
	// claim (generated from a template, named in
	// status.resourceClaimStatuses, or named in the entry), allocated and
	// reserved for the group, and every pod of the group that is bound
	// holds that claim's devices.
	Claims []string `json:"claims,omitempty"`
	// SameDomain is a node label: the nodes of the group's bound pods
	// share one value of it (a topology domain).
	SameDomain string `json:"sameDomain,omitempty"`
	// Gone: no group matches any more, and no claim that such a group
	// owned is left.
	Gone bool `json:"gone,omitempty"`
}

// Values of GroupExpectation.Bound.
const (
	BoundAll  = "all"
	BoundNone = "none"
	BoundSome = "some"
)

// CreatePods creates Replicas copies of a pod manifest, named
// <manifest's name>-<i>, each after the previous one is scheduled or found
// unschedulable, so that the order of allocation is the order of creation.
// Manifests, instead of Manifest, creates copies of several in turn (a-0,
// b-0, a-1, b-1, …): jobs that arrive together.
//
// With Group, a PodGroup manifest, each pod manifest's copies are one
// group: the runner creates a PodGroup from the file named as the pod
// manifest's pod, with gang.minCount set to Replicas where the file gives
// none, makes each copy join it (spec.schedulingGroup), creates the
// copies of every manifest at once and waits until each is scheduled or
// found unschedulable: a gang is scheduled whole or not at all.
type CreatePods struct {
	Manifest  string   `json:"manifest,omitempty"`
	Manifests []string `json:"manifests,omitempty"`
	Replicas  Count    `json:"replicas"`
	Group     string   `json:"group,omitempty"`
}

// Files are the pod manifests to create copies of, in turn.
func (c *CreatePods) Files() []string {
	if c.Manifest != "" {
		return []string{c.Manifest}
	}
	return c.Manifests
}

// DeletePods deletes Count pods (all, without) matching Pods (a name
// pattern) and, if set, holding a device of Tier, in creation order.
type DeletePods struct {
	Pods string `json:"pods"`
	Tier string `json:"tier,omitempty"`
	// Phase, if set (Running), deletes only pods in that phase: the bound
	// pods of a pattern, whichever group the scheduler chose.
	Phase string `json:"phase,omitempty"`
	// Count is how many; unset, every matching pod.
	Count *Count `json:"count,omitempty"`
}

// TaintAllocated creates a DeviceTaintRule for each device allocated to a
// pod matching Pods.
type TaintAllocated struct {
	Pods   string `json:"pods"`
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// FailGPU fails the GPU of each device allocated to a pod matching Pods
// with an XID (79, the GPU has fallen off the bus, if unset). The action
// itself checks what a failure must do at once: every such pod's status
// reports its device Unhealthy, and the device carries the XID's taint.
type FailGPU struct {
	Pods string `json:"pods"`
	XID  int    `json:"xid,omitempty"`
}

// zeroCounts names the counts of the scenario derived from the cluster
// (devicesOf, partitionsOf, …) that inv resolves to 0: the pods to
// create, delete or expect, the devices a pod holds, the groups.
func (s *Scenario) zeroCounts(inv Inventory) []string {
	var out []string
	check := func(where string, c *Count) {
		if c != nil && c.N == nil && inv.Resolve(c) == 0 {
			out = append(out, fmt.Sprintf("%s %s", where, c.String()))
		}
	}
	for i, st := range s.Steps {
		at := fmt.Sprintf("steps[%d] %q", i, st.Name)
		if st.CreatePods != nil {
			check(at+" createPods.replicas", &st.CreatePods.Replicas)
		}
		if st.DeletePods != nil {
			check(at+" deletePods.count", st.DeletePods.Count)
		}
		for j, e := range st.Expect {
			check(fmt.Sprintf("%s expect[%d].count", at, j), e.Count)
			check(fmt.Sprintf("%s expect[%d].devices", at, j), e.Devices)
		}
		for j, e := range st.ExpectGroups {
			check(fmt.Sprintf("%s expectGroups[%d].count", at, j), e.Count)
		}
	}
	return out
}

// Count is a number, or a number derived from the cluster: the GPUs of some
// tiers published through DRA (devicesOf) or counted through the
// device-plugin API (countedOf), the MIG devices of some profiles that the
// published counters still allow (partitionsOf), plus a constant.
//
//	replicas: 2
//	replicas: {devicesOf: [h100, a100, l4], plus: 1}
//	replicas: {partitionsOf: [1g.10gb], plus: 1}
//	replicas: {sharesOf: {tier: l4, memory: 7Gi}, plus: 1}
type Count struct {
	N         *int     `json:"-"`
	DevicesOf []string `json:"devicesOf,omitempty"`
	CountedOf []string `json:"countedOf,omitempty"`
	// CountedNodesOf counts the nodes of some tiers with GPUs counted
	// through the device-plugin API that are still free.
	CountedNodesOf []string `json:"countedNodesOf,omitempty"`
	PartitionsOf   []string `json:"partitionsOf,omitempty"`
	// PartitionedOf counts the free whole GPUs of tiers that are published
	// with MIG partitions (partitioning: mig).
	PartitionedOf []string `json:"partitionedOf,omitempty"`
	// SharesOf counts the shares of this much memory that the shared GPUs
	// of a tier have left room for.
	SharesOf *Shares `json:"sharesOf,omitempty"`
	// GroupsOf counts the groups of Size free GPUs of a tier that share an
	// attribute's value on one node: the claims a matchAttribute
	// constraint can still be met for.
	GroupsOf *Groups `json:"groupsOf,omitempty"`
	// PairsOf counts the pairs, on one node, of a free GPU of a tier and a
	// free device of another driver's DeviceClass that agree on an
	// attribute: the claims a matchAttribute across the two can still be
	// met for.
	PairsOf *Pairs `json:"pairsOf,omitempty"`
	// NodesOf counts the nodes with a free device of a DeviceClass whose
	// attribute has a value: the claims for all of them (allocationMode
	// All) that can be met.
	NodesOf *DeviceNodes `json:"nodesOf,omitempty"`
	// DivideBy divides the sum of the above (rounding down) before Plus
	// is added: {groupsOf: …, divideBy: 2, plus: 1} is more than half.
	DivideBy int `json:"divideBy,omitempty"`
	Plus     int `json:"plus,omitempty"`
}

// Groups is a number of groups of GPUs that share an attribute:
// {tier: l4, size: 2, attribute: resource.kubernetes.io/pcieRoot}.
type Groups struct {
	Tier string `json:"tier"`
	Size int    `json:"size"`
	// Attribute is the attribute's name as the driver's ResourceSlices
	// spell it: qualified for another domain than the driver's.
	Attribute string `json:"attribute"`
}

// Pairs is a number of pairs of a GPU and a device of another driver on
// one node whose attributes agree:
//
//	{tier: l4, attribute: resource.kubernetes.io/pcieRoot, class: rdma.nic.dralab.dev}
//	{tier: h100, attribute: gpu.dralab.dev/numa, class: rdma.nic.dralab.dev,
//	 classAttribute: resource.kubernetes.io/numaNode, except: ["0"]}
type Pairs struct {
	Tier string `json:"tier"`
	// Attribute is the GPU's attribute, qualified (domain/name).
	Attribute string `json:"attribute"`
	// Class is the DeviceClass of the other device of each pair, as the
	// claim asks for it.
	Class string `json:"class"`
	// ClassAttribute is the other device's attribute, qualified; the
	// GPU's Attribute unless set (two drivers may name a value apart).
	ClassAttribute string `json:"classAttribute,omitempty"`
	// Except leaves out the pairs on these values (the ones a step's
	// other pods take first).
	Except []string `json:"except,omitempty"`
}

func (p *Pairs) otherAttribute() string {
	if p.ClassAttribute != "" {
		return p.ClassAttribute
	}
	return p.Attribute
}

// DeviceNodes is a number of nodes with a free device of a DeviceClass
// whose attribute has a value: {class: rdma.nic.dralab.dev, attribute:
// resource.kubernetes.io/numaNode, value: "0"}.
type DeviceNodes struct {
	Class     string `json:"class"`
	Attribute string `json:"attribute"`
	Value     string `json:"value"`
}

// Shares is a number of shares of GPUs that several claims share:
// {tier: l4, memory: 7Gi}.
type Shares struct {
	Tier   string `json:"tier"`
	Memory string `json:"memory"`
}

// UnmarshalJSON accepts a number or an object, strictly.
func (c *Count) UnmarshalJSON(data []byte) error {
	var n int
	if err := json.Unmarshal(data, &n); err == nil {
		*c = Count{N: &n}
		return nil
	}
	type plain Count
	var p plain
	strict, err := sigsjson.UnmarshalStrict(data, &p)
	if err == nil && len(strict) > 0 {
		err = errors.Join(strict...)
	}
	if err != nil {
		return fmt.Errorf("a count is a number or {devicesOf, countedOf, countedNodesOf, partitionsOf, partitionedOf, sharesOf, groupsOf, pairsOf, nodesOf, divideBy, plus}: %w", err)
	}
	*c = Count(p)
	return nil
}

// MarshalJSON writes a plain number as a number.
func (c Count) MarshalJSON() ([]byte, error) {
	if c.N != nil {
		return json.Marshal(*c.N)
	}
	type plain Count
	return json.Marshal(plain(c))
}

// String renders a count for messages.
func (c *Count) String() string {
	if c == nil {
		return "all"
	}
	if c.N != nil {
		return fmt.Sprint(*c.N)
	}
	s := ""
	if len(c.DevicesOf) > 0 {
		s = fmt.Sprintf("devices of %v", c.DevicesOf)
	}
	if len(c.CountedOf) > 0 {
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("counted GPUs of %v", c.CountedOf)
	}
	if len(c.CountedNodesOf) > 0 {
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("nodes with counted GPUs of %v", c.CountedNodesOf)
	}
	if len(c.PartitionsOf) > 0 {
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("free MIG partitions of %v", c.PartitionsOf)
	}
	if len(c.PartitionedOf) > 0 {
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("free partitioned GPUs of %v", c.PartitionedOf)
	}
	if c.SharesOf != nil {
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("%s shares of %s GPUs", c.SharesOf.Memory, c.SharesOf.Tier)
	}
	if g := c.GroupsOf; g != nil {
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("groups of %d free %s GPUs sharing %s", g.Size, g.Tier, g.Attribute)
	}
	if p := c.PairsOf; p != nil {
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("pairs of a free %s GPU and a free %s device agreeing on %s", p.Tier, p.Class, p.Attribute)
		if p.ClassAttribute != "" {
			s += " and " + p.ClassAttribute
		}
		if len(p.Except) > 0 {
			s += fmt.Sprintf(" but %v", p.Except)
		}
	}
	if n := c.NodesOf; n != nil {
		if s != "" {
			s += " + "
		}
		s += fmt.Sprintf("nodes with a free %s device whose %s is %q", n.Class, n.Attribute, n.Value)
	}
	if c.DivideBy > 1 {
		s = "(" + s + ") / " + fmt.Sprint(c.DivideBy)
	}
	if c.Plus != 0 {
		s += fmt.Sprintf(" %+d", c.Plus)
	}
	return s
}

// Expectation is what must hold for a group of pods: the next Count pods
// matching Pods in creation order that no earlier counted expectation took
// (from the end with Last), or, without Count, every pod matching Pods.
// Every field set is checked; the rest is free.
type Expectation struct {
	Pods  string `json:"pods"`
	Count *Count `json:"count,omitempty"`
	Last  bool   `json:"last,omitempty"`
	// Per pod.
	Phase      string `json:"phase,omitempty"`
	Request    string `json:"request,omitempty"`
	Subrequest string `json:"subrequest,omitempty"`
	Tier       string `json:"tier,omitempty"`
	// Profile is the MIG profile of every device (1g.10gb); Consumed what
	// every share consumes of its device, which also needs a share ID: a
	// GPU's memory (7Gi), else the one capacity it consumes (a NIC's
	// bandwidth, 30G).
	Profile  string `json:"profile,omitempty"`
	Consumed string `json:"consumed,omitempty"`
	// DeviceType is the type every GPU of the pod publishes: gpu, mig or
	// time-slice (a time-sliced share of a GPU).
	DeviceType string `json:"deviceType,omitempty"`
	// NodeTier is the tier of the GPUs of the pod's node (for counted GPUs,
	// where no device is named).
	NodeTier string `json:"nodeTier,omitempty"`
	// NodeLabels are labels the pod's node carries:
	// {topology.dralab.dev/rack: a} for a pod that must run in rack a,
	// where its network-attached devices are reached.
	NodeLabels map[string]string `json:"nodeLabels,omitempty"`
	Devices    *Count            `json:"devices,omitempty"`
	// AllOfNode (a tier): the pod holds every GPU of the tier published on
	// its node, in use or not, as a claim with allocationMode All does.
	AllOfNode     string `json:"allOfNode,omitempty"`
	SameAttribute string `json:"sameAttribute,omitempty"`
	// NodeOperations is what the node did for each device: "skipped" (the
	// allocation skips NodePrepareResources, as the device's slice says,
	// and no driver wrote the device's status: it was never asked to
	// prepare it) or "prepared" (it was, and its driver marked it Ready).
	NodeOperations string `json:"nodeOperations,omitempty"`
	// SameValueOf: every device of the pod has one of the attributes
	// (fully qualified; a driver publishes its own unqualified) and all
	// have one value: [gpu.dralab.dev/numa, resource.kubernetes.io/numaNode]
	// for a GPU and a NIC on one NUMA node though the drivers name it
	// differently.
	SameValueOf []string `json:"sameValueOf,omitempty"`
	// DistinctAttribute: every device of the pod has its own value of the
	// attribute (what a claim's distinctAttribute constraint asks).
	DistinctAttribute string `json:"distinctAttribute,omitempty"`
	AdminAccess       *bool  `json:"adminAccess,omitempty"`
	// ExtendedResourceClaim: the pod's extended resources are backed by a
	// claim (status.extendedResourceClaimStatus).
	ExtendedResourceClaim bool `json:"extendedResourceClaim,omitempty"`
	// Untainted: no device of the pod is tainted.
	Untainted bool `json:"untainted,omitempty"`
	// Health is every device's health in the pod's status, as the kubelet
	// reports it from the driver: Healthy, Unhealthy or Unknown.
	Health string `json:"health,omitempty"`
	// DeviceStatus are conditions every device has True in its claim's
	// status.devices (Ready: the driver prepared it); StatusData are
	// values every device's data there holds.
	DeviceStatus []string          `json:"deviceStatus,omitempty"`
	StatusData   map[string]string `json:"statusData,omitempty"`
	// Reason is why a Pending pod waits, as dralab's report reads the
	// cluster's state (the scheduler itself only says "cannot allocate all
	// claims"): NoMatchingDevice, AllAllocated, Tainted, Insufficient (an
	// extended resource), CounterExhausted, CapacityExhausted,
	// SelectorError, ConstraintUnmet, NotOnOneNode, IncompatibleGroups, NodeResources, NotRetried or NodeTaint; for a pod of a PodGroup also
	// GangIncomplete, GangShort, TopologyShort or GangUnschedulable.
	// A list names reasons of which any may hold: [AllAllocated,
	// CapacityExhausted] on a lab where the last matching device is a
	// shared one with too little left.
	Reason Reasons `json:"reason,omitempty"`
	// DriverDevices counts the pod's devices by driver: {gpu.dralab.dev:
	// 1, nic.dralab.dev: 1} for a GPU and its NIC; every driver not
	// named must have none.
	DriverDevices map[string]int `json:"driverDevices,omitempty"`
	// DeviceMetadata: the pod's container prints device metadata files
	// (a hollow node's container does; a real one must print each as
	// `path=first line`), and they name exactly the pod's allocated
	// devices, each under its claim's request, with the attributes its
	// ResourceSlice publishes.
	DeviceMetadata bool `json:"deviceMetadata,omitempty"`
	// NodeAllocatable is what the scheduler accounted for the pod's node
	// resources through its devices, per resource: {memory: 8Gi} for a
	// GPU's host-memory overhead (the pod's
	// status.nodeAllocatableResourceClaimStatuses, mappings and
	// overheads summed); every resource not named must have none.
	NodeAllocatable map[string]string `json:"nodeAllocatable,omitempty"`
	// For the whole group.
	SameDevice bool `json:"sameDevice,omitempty"`
	// TierCounts counts the group's pods by tier (of their devices, or of
	// their node's GPUs); every tier not named must have none.
	TierCounts map[string]Count `json:"tierCounts,omitempty"`
}

// What the node did for a device (Expectation.NodeOperations).
const (
	NodeOperationsSkipped  = "skipped"
	NodeOperationsPrepared = "prepared"
)

// Pending reasons.
const (
	ReasonNoMatchingDevice = "NoMatchingDevice"
	ReasonAllAllocated     = "AllAllocated"
	ReasonTainted          = "Tainted"
	ReasonInsufficient     = "Insufficient"
	// A free partition whose counters the allocated partitions hold; a
	// shared device with too little capacity left for one more share.
	ReasonCounterExhausted  = "CounterExhausted"
	ReasonCapacityExhausted = "CapacityExhausted"
	// A free device whose counters have room, kept out by the compatibility
	// groups of what is allocated on its counter set.
	ReasonIncompatibleGroups = "IncompatibleGroups"
	// A selector that fails on a device, which makes the allocator give
	// up the claim.
	ReasonSelectorError = "SelectorError"
	// Enough free devices, none of whose sets meets a matchAttribute
	// constraint.
	ReasonConstraintUnmet = "ConstraintUnmet"
	// Enough free devices in the cluster, but not on one node.
	ReasonNotOnOneNode = "NotOnOneNode"
	// The devices fit, but not the node's memory or CPUs with what the
	// devices add (nodeAllocatableResources).
	ReasonNodeResources = "NodeResources"
	// The scheduler refused the pod for the node's memory or CPUs, and a
	// node has room for it now: it has not tried the pod again.
	ReasonNotRetried = "NotRetried"
	// The devices fit on nodes whose taints the pod does not tolerate,
	// and on no other.
	ReasonNodeTaint = "NodeTaint"
	// A pod of a PodGroup whose own claims fit: fewer pods than minCount
	// exist; too few free devices for all the unbound pods; none of the
	// group's topology domains has enough; or no whole placement found.
	ReasonGangIncomplete    = "GangIncomplete"
	ReasonGangShort         = "GangShort"
	ReasonTopologyShort     = "TopologyShort"
	ReasonGangUnschedulable = "GangUnschedulable"
)

// Reasons are the pending reasons an expectation accepts: one, written as a
// string, or a list of which any may hold.
type Reasons []string

// UnmarshalJSON accepts a string or a list of strings.
func (r *Reasons) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*r = Reasons{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("a reason is a string or a list of them: %w", err)
	}
	*r = list
	return nil
}

// MarshalJSON writes one reason as a string.
func (r Reasons) MarshalJSON() ([]byte, error) {
	if len(r) == 1 {
		return json.Marshal(r[0])
	}
	return json.Marshal([]string(r))
}

// String joins the reasons with "or".
func (r Reasons) String() string { return strings.Join(r, " or ") }

// FailsGPUs says whether a step fails GPUs (failGPU), which needs a
// runner with GPUFaults.
func (s *Scenario) FailsGPUs() bool {
	return slices.ContainsFunc(s.Steps, func(st Step) bool { return st.FailGPU != nil })
}

// LabFile is the example lab the scenario is written for, a file name of
// lab/examples ("default.yaml" unless the scenario names another).
func (s *Scenario) LabFile() string {
	if s.Lab == "" {
		return examples.DefaultFile
	}
	return s.Lab + ".yaml"
}
