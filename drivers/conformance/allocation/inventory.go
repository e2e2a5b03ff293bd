package allocation

import (
	"context"
	"errors"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// States of a device, for a request (Candidate) or for any request without
// tolerations (DeviceRow).
const (
	StateFree = "Free"
	// StateAllocated: a claim holds the device to itself.
	StateAllocated = "Allocated"
	// StateShared: claims share the device, and it has room for more.
	StateShared = "Shared"
	// StateTainted: a taint the request does not tolerate.
	StateTainted = "Tainted"
	// StateNoCapacity: the claims that share the device left too little
	// of it; StateTooBig: one share may never take what is asked.
	StateNoCapacity = "NoCapacity"
	StateTooBig     = "TooBig"
	// StateNoCounter: allocated partitions hold the counters it needs.
	StateNoCounter = "NoCounter"
	// StateIncompatible: what is allocated on its counter set shares no
	// compatibility group with it.
	StateIncompatible = "Incompatible"
)

var stateNames = map[deviceState]string{
	available: StateFree, tooBig: StateTooBig, noRoom: StateNoCapacity, heldByClaim: StateAllocated,
	tainted: StateTainted, noCounter: StateNoCounter, apart: StateIncompatible,
}

// Holder is a claim that holds a device (or a share of it), with the pods
// that use it.
type Holder struct {
	// Claim is namespace/name.
	Claim string `json:"claim"`
	// Request and Subrequest are the claim's request the device was
	// allocated for and, for a prioritized list, the alternative chosen.
	Request    string `json:"request"`
	Subrequest string `json:"subrequest,omitempty"`
	// Pods are the pods the claim is reserved for (namespace/name); for a
	// claim reserved for a PodGroup (Group, namespace/name), the group's
	// pods that use it.
	Pods  []string `json:"pods,omitempty"`
	Group string   `json:"group,omitempty"`
	// AdminAccess: the claim monitors the device and holds none of it.
	AdminAccess bool `json:"adminAccess,omitempty"`
	// ShareID names the share of a device several claims share; Consumed
	// is what the share takes of its memory (or of its one capacity).
	ShareID  string `json:"shareID,omitempty"`
	Consumed string `json:"consumed,omitempty"`
	// Aligned are the claim's constraints that tie the device to its
	// other devices ("resource.kubernetes.io/pcieRoot pci0000:15, with
	// nic-0").
	Aligned []string `json:"aligned,omitempty"`
}

// Candidate is a device that matches one alternative of a request of a
// waiting pod (a request, or one subrequest of a prioritized list), and
// whether the request could have it now.
type Candidate struct {
	// Claim is the pod's claim ("" for an extended resource backed by a
	// DeviceClass, whose name Request is then).
	Claim      string `json:"claim,omitempty"`
	Request    string `json:"request"`
	Subrequest string `json:"subrequest,omitempty"`
	// Count is how many devices the alternative asks for, on one node.
	Count int `json:"count"`
	// Node is the node of a node-local device; "" for a device several
	// nodes reach: Reaches are those nodes where a node selector picks
	// them (none for a device every node reaches).
	Node    string   `json:"node,omitempty"`
	Reaches []string `json:"reaches,omitempty"`
	Device  string   `json:"device"`
	// State is one of the State constants; Detail the allocator's reason
	// in words, naming what holds it.
	State   string   `json:"state"`
	Detail  string   `json:"detail,omitempty"`
	Holders []Holder `json:"holders,omitempty"`
}

// Alternative names the way of meeting a request the candidate belongs
// to: claim/request/subrequest (the subrequest empty for a request of one
// alternative).
func (c Candidate) Alternative() string {
	return c.Claim + "/" + c.Request + "/" + c.Subrequest
}

// ErrNoPendingClaims means the pod has no claim left to allocate.
var ErrNoPendingClaims = errors.New("no claim of the pod waits for an allocation")

// Candidates are, for each request of the pod's claims that are not
// allocated yet (and its extended resources that a DeviceClass serves),
// every device matching each alternative, in the order the allocator
// tries the alternatives, with what keeps it from the request. A selector
// that fails on a device stops the listing of that alternative, as it
// stops the allocator: the pod's Reason names it.
func (s *Snapshot) Candidates(ctx context.Context, pod *v1.Pod) ([]Candidate, error) {
	holders := s.AllocatedDevices()
	held := s.Holders(ctx)
	var out []Candidate
	add := func(claim, request string, alt alternative) error {
		found, err := s.matching(ctx, alt)
		if selErr := (*selectorError)(nil); errors.As(err, &selErr) {
			return nil
		}
		if err != nil {
			return err
		}
		sub := ""
		if claim != "" {
			_, sub, _ = strings.Cut(alt.name, "/")
		}
		out = slices.Grow(out, len(found))
		states := s.classifyAll(found, alt, pod.Namespace, holders)
		for i, c := range found {
			state, detail := states[i].state, states[i].detail
			key := c.driver + "/" + c.String()
			out = append(out, Candidate{Claim: claim, Request: request, Subrequest: sub, Count: alt.count, Node: c.node, Reaches: s.reachedBy(c),
				Device: key, State: stateNames[state], Detail: detail, Holders: held[key]})
		}
		return nil
	}
	pending := false
	for _, ref := range podClaims(pod) {
		claim := s.Claims[claimKey(pod.Namespace, ref.name)]
		if claim == nil || claim.Status.Allocation != nil {
			continue
		}
		pending = true
		for _, req := range claim.Spec.Devices.Requests {
			for _, alt := range alternatives(req) {
				if err := add(claim.Name, req.Name, alt); err != nil {
					return nil, err
				}
			}
		}
	}
	if len(pod.Spec.ResourceClaims) == 0 {
		for _, alt := range s.extendedRequests(pod) {
			pending = true
			if err := add("", alt.name, alt); err != nil {
				return nil, err
			}
		}
	}
	if !pending {
		return nil, ErrNoPendingClaims
	}
	return out, nil
}

// FreePerNode counts, for each alternative of the candidates (claim,
// request, subrequest), the free devices each node can reach: its own and
// those any node reaches. A claim's devices come from one node, so this,
// not a count over the cluster, is what an alternative of several devices
// needs.
func FreePerNode(cands []Candidate) map[string]map[string]int {
	out := map[string]map[string]int{}
	anywhere := map[string]int{}
	nodes := map[string]bool{}
	for _, c := range cands {
		alt := c.Alternative()
		if out[alt] == nil {
			out[alt] = map[string]int{}
		}
		for _, n := range append([]string{c.Node}, c.Reaches...) {
			if n == "" {
				continue
			}
			nodes[n] = true
			if _, ok := out[alt][n]; !ok {
				out[alt][n] = 0
			}
		}
		if c.State != StateFree {
			continue
		}
		switch {
		case c.Node != "":
			out[alt][c.Node]++
		case len(c.Reaches) > 0:
			for _, n := range c.Reaches {
				out[alt][n]++
			}
		default:
			anywhere[alt]++
		}
	}
	for alt, n := range anywhere {
		for node := range nodes {
			out[alt][node] += n
		}
		if len(nodes) == 0 {
			out[alt][""] = n
		}
	}
	return out
}

// reachedBy are the nodes of the snapshot a device that a node selector
// places reaches; none for a node-local device, one every node reaches,
// or a snapshot without nodes.
func (s *Snapshot) reachedBy(d deviceRef) []string {
	if d.node != "" || d.slice == nil || len(s.Nodes) == 0 {
		return nil
	}
	spec := &d.slice.Spec
	all := ptr.Deref(spec.AllNodes, false)
	if ptr.Deref(spec.PerDeviceNodeSelection, false) {
		all = ptr.Deref(d.dev.AllNodes, false)
	}
	if all {
		return nil
	}
	return s.reaching(d)
}

// reaching are the snapshot's nodes device d is reachable from, sorted.
func (s *Snapshot) reaching(d deviceRef) []string {
	var out []string
	for name, n := range s.Nodes {
		if d.reaches(n) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// DeviceRow is a published device (of the newest generation of its pool),
// what holds it, and whether a request without tolerations could have it
// now.
type DeviceRow struct {
	Node       string            `json:"node,omitempty"`
	Driver     string            `json:"driver"`
	Pool       string            `json:"pool"`
	Device     string            `json:"device"`
	Tier       string            `json:"tier,omitempty"`
	Type       string            `json:"type,omitempty"`
	Product    string            `json:"product,omitempty"`
	Profile    string            `json:"profile,omitempty"`
	Attributes map[string]string `json:"attributes,omitempty"`
	// State is StateFree, StateAllocated, StateShared (claims share it,
	// with room for more), StateTainted, StateNoCounter or
	// StateIncompatible.
	State   string   `json:"state"`
	Taints  []string `json:"taints,omitempty"`
	Holders []Holder `json:"holders,omitempty"`
}

// DeviceRows lists every published device, by node, pool and publication
// order.
func (s *Snapshot) DeviceRows(ctx context.Context) ([]DeviceRow, error) {
	st := s.state()
	left, groups := st.CountersLeft(), st.GroupsHeld()
	held := s.Holders(ctx)
	var out []DeviceRow
	for _, d := range st.Published("", "") {
		key := d.Key().String()
		row := DeviceRow{Node: d.Node, Driver: d.Driver, Pool: d.Pool, Device: d.Name, Product: stringAttr(&d.Device, "productName"),
			Type: s.Vocabulary.deviceType(d.Driver, &d.Device), Attributes: stringAttrs(&d.Device), Holders: held[key],
			Taints: taintStrings(st.Taints(d))}
		if s.Vocabulary.ProfileAttribute != "" {
			row.Profile = stringAttr(&d.Device, s.Vocabulary.ProfileAttribute)
		}
		tier, err := s.Vocabulary.tier(ctx, d.Driver, &d.Device)
		if err != nil {
			return nil, err
		}
		row.Tier = tier
		row.State = deviceRowState(d, row.Holders, left, groups, len(st.Blocked(d, nil)) > 0)
		out = append(out, row)
	}
	slices.SortStableFunc(out, func(a, b DeviceRow) int {
		return strings.Compare(a.Node+"\x00"+a.Driver+"\x00"+a.Pool, b.Node+"\x00"+b.Driver+"\x00"+b.Pool)
	})
	return out, nil
}

func deviceRowState(d devices.Device, holders []Holder, left devices.Counters, groups devices.Groups, blocked bool) string {
	holding := slices.ContainsFunc(holders, func(h Holder) bool { return !h.AdminAccess })
	shared := ptr.Deref(d.AllowMultipleAllocations, false)
	switch {
	case holding && !shared:
		return StateAllocated
	case blocked:
		return StateTainted
	case holding:
		return StateShared
	case !left.Fits(d):
		return StateNoCounter
	case !groups.Admits(d):
		return StateIncompatible
	}
	return StateFree
}

// Holders maps each allocated device (driver/pool/device) to the claims
// that have it, admin access included, in the claims' order. A snapshot
// of NewSnapshot finds them once (the map is shared: read it only).
func (s *Snapshot) Holders(ctx context.Context) map[string][]Holder {
	c := s.matchCache
	if c == nil {
		return s.holders(ctx)
	}
	c.holdersOnce.Do(func() { c.holders = s.holders(ctx) })
	return c.holders
}

func (s *Snapshot) holders(ctx context.Context) map[string][]Holder {
	out := map[string][]Holder{}
	for i := range s.AllClaims {
		c := &s.AllClaims[i]
		if c.Status.Allocation == nil {
			continue
		}
		var pods []string
		group := ""
		for _, r := range c.Status.ReservedFor {
			switch r.Resource {
			case "pods":
				pods = append(pods, c.Namespace+"/"+r.Name)
			case "podgroups":
				// Reserved for the group, not its pods: the pods are the
				// group's that use the claim.
				group = c.Namespace + "/" + r.Name
				for _, p := range s.GroupMembers(c.Namespace, r.Name) {
					if slices.Contains(ClaimNames(p), c.Name) {
						pods = append(pods, c.Namespace+"/"+p.Name)
					}
				}
			}
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			req, sub, _ := strings.Cut(r.Request, "/")
			h := Holder{Claim: c.Namespace + "/" + c.Name, Request: req, Subrequest: sub, Pods: pods, Group: group,
				AdminAccess: ptr.Deref(r.AdminAccess, false), Consumed: consumed(r.ConsumedCapacity), Aligned: s.Aligned(ctx, c, r)}
			if r.ShareID != nil {
				h.ShareID = string(*r.ShareID)
			}
			key := r.Driver + "/" + r.Pool + "/" + r.Device
			out[key] = append(out[key], h)
		}
	}
	return out
}

// ClaimRow is a claim, its allocation and whom it is reserved for.
type ClaimRow struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// State is "allocated,reserved", "allocated", "pending" or, for a
	// claim being deleted, "deleted" before the others: as kubectl get
	// resourceclaims says.
	State string `json:"state"`
	// Nodes are the nodes of its devices' slices.
	Nodes       []string      `json:"nodes,omitempty"`
	Results     []ClaimResult `json:"results,omitempty"`
	ReservedFor []string      `json:"reservedFor,omitempty"`
}

// ClaimResult is one allocated device of a claim.
type ClaimResult struct {
	Request    string `json:"request"`
	Subrequest string `json:"subrequest,omitempty"`
	// Device is driver/pool/device.
	Device      string `json:"device"`
	AdminAccess bool   `json:"adminAccess,omitempty"`
	// Conditions are the device's True conditions in the claim's status.
	Conditions []string `json:"conditions,omitempty"`
}

// ClaimRows lists the snapshot's claims (its namespace's), by namespace and
// name.
func (s *Snapshot) ClaimRows() []ClaimRow {
	nodeOf := map[string]string{}
	for _, d := range s.state().Published("", "") {
		nodeOf[d.Key().String()] = d.Node
	}
	var out []ClaimRow
	for _, c := range s.Claims {
		row := ClaimRow{Namespace: c.Namespace, Name: c.Name, State: "pending"}
		for _, r := range c.Status.ReservedFor {
			// As kubectl names them: pod/NAME, podgroup/NAME.
			row.ReservedFor = append(row.ReservedFor, strings.TrimSuffix(strings.ToLower(r.Resource), "s")+"/"+r.Name)
		}
		if a := c.Status.Allocation; a != nil {
			row.State = "allocated"
			if len(c.Status.ReservedFor) > 0 {
				row.State = "allocated,reserved"
			}
			for _, r := range a.Devices.Results {
				req, sub, _ := strings.Cut(r.Request, "/")
				key := r.Driver + "/" + r.Pool + "/" + r.Device
				conditions, _ := deviceStatus(c, r)
				row.Results = append(row.Results, ClaimResult{Request: req, Subrequest: sub, Device: key, AdminAccess: ptr.Deref(r.AdminAccess, false), Conditions: conditions})
				if n := nodeOf[key]; n != "" && !slices.Contains(row.Nodes, n) {
					row.Nodes = append(row.Nodes, n)
				}
			}
		}
		if c.DeletionTimestamp != nil {
			row.State = "deleted," + row.State
		}
		out = append(out, row)
	}
	slices.SortFunc(out, func(a, b ClaimRow) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) })
	return out
}
