// Package dashboard draws a lab's GPUs and what holds them: every node a
// row, its devices tiles coloured by tier and labelled in words (free,
// allocated to which pod, shared, partitioned, tainted, unhealthy), counted
// nodes apart, and the pending pods with the report package's reason, a
// PodGroup's framed together. One renderer serves the live page of the lab
// process and static reports.
package dashboard

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/natural"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// Page is what the dashboard shows.
type Page struct {
	Title     string
	Generated time.Time
	Nodes     []Node
	// Pending are the waiting pods of no PodGroup; Groups the PodGroups
	// with a waiting pod, each with its pods.
	Pending []Pending
	Groups  []Group
}

// Group is a PodGroup with a waiting pod: its gang's minCount (0 when the
// group has no gang policy or is not read), its pods, and where the bound
// ones run.
type Group struct {
	// Name is namespace/name.
	Name     string
	MinCount int
	Pods     int
	Bound    []string
	Pending  []Pending
}

// Node is a node with its devices, or with its counted GPUs.
type Node struct {
	Name    string
	Devices []Tile
	// Counted GPUs are advertised through the device-plugin API: a count,
	// no device.
	Counted            bool
	CountedTier        string
	Allocatable, InUse int64
	// Partitions are the partition types of the node's pools, where their
	// slices name a partitionTypeAttribute (the DRAPartitionableDevicesType
	// gate): what a ResourcePoolStatusRequest answers, counted by the lab.
	Partitions []allocation.PartitionType
	// Reaches are, for a row of a pool no one node owns (its slices select
	// nodes, or every node, or each device its own), the nodes its
	// devices are reachable from; empty for a node's row.
	Reaches []string
	// Incomplete say which of the row's pools the allocator takes nothing
	// from: fewer slices of its newest generation published than the pool
	// names.
	Incomplete []string
}

// Device states, in words; a tile's class names them too.
const (
	StateFree        = "free"
	StateAllocated   = "allocated"
	StateShared      = "shared"
	StatePartitioned = "partitioned"
	StateTainted     = "tainted"
	StateUnhealthy   = "unhealthy"
)

// Tile is one device: a whole GPU, with its MIG devices in use drawn on
// its memory slices.
type Tile struct {
	// Ref is driver/pool/device.
	Ref     string
	Name    string
	Product string
	Memory  string
	Tier    string
	// State is the most telling of the device's states; States all of them.
	State  string
	States []string
	// Holders are the claims that hold the device (or a share or a MIG
	// device of it), with their pods.
	Holders []Holder
	Taints  []string
	Health  string
	// Slices are a partitioned GPU's memory slices, each with the MIG
	// device that holds it, if any.
	Slices []Slice
}

// Holder is a claim holding a device or a part of it, as the allocation
// reading has it (its pods, its group, the subrequest chosen for it, the
// constraints that align it), and what of the device it holds.
type Holder struct {
	allocation.Holder
	// Part is what of the device it holds: a MIG device and profile, or a
	// share's consumed memory.
	Part string
}

// Slice is one memory slice of a partitioned GPU.
type Slice struct {
	Index  int
	Holder string
}

// Pending is a pod that waits, with why.
type Pending struct {
	Pod    string
	Reason string
}

// Build makes the page of a snapshot read for all namespaces.
func Build(ctx context.Context, title string, snap *allocation.Snapshot) (*Page, error) {
	rows, err := snap.Rows(ctx)
	if err != nil {
		return nil, err
	}
	p := &Page{Title: title, Generated: time.Now()}
	health := map[string]string{}
	pods := map[string]*v1.Pod{}
	for i := range snap.Pods {
		pods[snap.Pods[i].Namespace+"/"+snap.Pods[i].Name] = &snap.Pods[i]
	}
	groups := map[string]*Group{}
	for _, r := range rows {
		if r.Device != "" && r.Health != "" {
			health[r.DeviceRef()] = strings.TrimSuffix(r.Health+": "+r.HealthMessage, ": ")
		}
		if r.Device == "" && r.Node == "" && r.Phase != v1.PodSucceeded && r.Phase != v1.PodFailed {
			reason := r.Reason
			if reason == "" {
				reason = "waiting for the scheduler"
			}
			pending := Pending{Pod: r.Namespace + "/" + r.Pod, Reason: reason}
			if pod := pods[pending.Pod]; pod != nil && allocation.GroupOf(pod) != "" {
				name := r.Namespace + "/" + allocation.GroupOf(pod)
				if groups[name] == nil {
					groups[name] = groupOf(snap, name)
				}
				groups[name].Pending = append(groups[name].Pending, pending)
				continue
			}
			p.Pending = append(p.Pending, pending)
		}
	}
	for _, name := range slices.SortedFunc(maps.Keys(groups), natural.Compare) {
		p.Groups = append(p.Groups, *groups[name])
	}
	holders := claimHolders(ctx, snap)

	byNode := map[string]*Node{}
	node := func(name string) *Node {
		if n, ok := byNode[name]; ok {
			return n
		}
		n := &Node{Name: name}
		byNode[name] = n
		return n
	}
	// The newest generation of each pool is what the allocator reads; an
	// older one's slices are on their way out.
	newest := map[string]int64{}
	for _, pool := range snap.Pools() {
		newest[pool.Driver+"/"+pool.Name] = pool.Generation
	}
	seen := map[string]bool{}
	reaches := map[string]map[string]bool{}
	for i := range snap.Slices {
		s := &snap.Slices[i]
		if s.Spec.Pool.Generation < newest[s.Spec.Driver+"/"+s.Spec.Pool.Name] {
			continue
		}
		nodeName := s.Spec.Pool.Name
		if s.Spec.NodeName != nil {
			nodeName = *s.Spec.NodeName
		} else {
			// A pool several nodes reach: one row, naming them.
			if reaches[nodeName] == nil {
				reaches[nodeName] = map[string]bool{}
			}
			for j := range s.Spec.Devices {
				for _, n := range snap.Reaches(s, &s.Spec.Devices[j]) {
					reaches[nodeName][n] = true
				}
			}
			node(nodeName)
		}
		// A partitioned GPU's MIG devices, by its UUID.
		migs := map[string][]resourceapi.Device{}
		for _, d := range s.Spec.Devices {
			if parent := attr(d, gpu.AttrParentUUID); parent != "" {
				migs[parent] = append(migs[parent], d)
			}
		}
		for _, d := range s.Spec.Devices {
			if attr(d, gpu.AttrParentUUID) != "" {
				continue
			}
			ref := s.Spec.Driver + "/" + s.Spec.Pool.Name + "/" + d.Name
			if seen[ref] {
				continue
			}
			seen[ref] = true
			t := Tile{Ref: ref, Name: d.Name, Product: attr(d, "productName"), Taints: snap.DeviceTaints(s.Spec.Driver, s.Spec.Pool.Name, d.Name), Health: health[ref]}
			if c, ok := d.Capacity[gpu.CapacityMemory]; ok {
				t.Memory = memory(c.Value)
			}
			if tier, err := nodedrivers.Vocabulary.Tier(ctx, s.Spec.Driver, &d); err == nil {
				t.Tier = tier
			}
			t.Holders = holders[ref]
			for _, m := range migs[attr(d, gpu.AttrUUID)] {
				mref := s.Spec.Driver + "/" + s.Spec.Pool.Name + "/" + m.Name
				for _, h := range holders[mref] {
					h.Part = fmt.Sprintf("%s (%s)", m.Name, or(attr(m, gpu.AttrProfile), "time slice"))
					t.Holders = append(t.Holders, h)
					if mh := health[mref]; mh != "" && t.Health == "" {
						t.Health = mh
					}
				}
			}
			t.Slices = memorySlices(d, migs[attr(d, gpu.AttrUUID)], s.Spec.Driver+"/"+s.Spec.Pool.Name+"/", holders)
			t.states(isTrue(d.AllowMultipleAllocations))
			node(nodeName).Devices = append(node(nodeName).Devices, t)
		}
	}
	for name, nodes := range reaches {
		node(name).Reaches = slices.SortedFunc(maps.Keys(nodes), natural.Compare)
	}
	if incomplete := snap.IncompletePools(); len(incomplete) > 0 {
		nodeOf := poolNodes(snap)
		for _, pool := range incomplete {
			n := node(nodeOf[pool.Driver+"/"+pool.Name])
			n.Incomplete = append(n.Incomplete, fmt.Sprintf("pool %s/%s: %d of its %d slices of generation %d published; the allocator takes none of its devices until every one is",
				pool.Driver, pool.Name, pool.Published, pool.SliceCount, pool.Generation))
		}
	}
	if pts := snap.PartitionTypes(); len(pts) > 0 {
		nodeOf := poolNodes(snap)
		for _, pt := range pts {
			n := node(nodeOf[pt.Driver+"/"+pt.Pool])
			n.Partitions = append(n.Partitions, pt)
		}
	}
	for name, n := range snap.Nodes {
		q := n.Status.Allocatable[v1.ResourceName(gpu.ExtendedResource)]
		if q.Value() == 0 {
			continue
		}
		c := node(name)
		c.Counted, c.CountedTier, c.Allocatable = true, nodedrivers.Vocabulary.NodeTier(n), q.Value()
	}
	for _, pod := range snap.Pods {
		if c, ok := byNode[pod.Spec.NodeName]; ok && c.Counted && pod.Status.Phase != v1.PodSucceeded && pod.Status.Phase != v1.PodFailed {
			for _, ctr := range pod.Spec.Containers {
				q := ctr.Resources.Limits[v1.ResourceName(gpu.ExtendedResource)]
				c.InUse += q.Value()
			}
		}
	}
	for _, n := range byNode {
		slices.SortFunc(n.Devices, func(a, b Tile) int { return natural.Compare(a.Name, b.Name) })
		p.Nodes = append(p.Nodes, *n)
	}
	slices.SortFunc(p.Nodes, func(a, b Node) int { return natural.Compare(a.Name, b.Name) })
	return p, nil
}

// groupOf is the PodGroup namespace/name as the snapshot has it: its
// minCount and its pods, bound or not.
func groupOf(snap *allocation.Snapshot, name string) *Group {
	g := &Group{Name: name}
	if pg := snap.PodGroups[name]; pg != nil && pg.Spec.SchedulingPolicy.Gang != nil {
		g.MinCount = int(pg.Spec.SchedulingPolicy.Gang.MinCount)
	}
	namespace, group, _ := strings.Cut(name, "/")
	for _, pod := range snap.GroupMembers(namespace, group) {
		g.Pods++
		if pod.Spec.NodeName != "" {
			g.Bound = append(g.Bound, pod.Name+" on "+pod.Spec.NodeName)
		}
	}
	return g
}

// states sets a tile's states from its holders, taints and health.
func (t *Tile) states(shared bool) {
	switch {
	case len(t.Slices) > 0 && len(t.Holders) > 0 && t.Holders[0].Part != "":
		t.States = append(t.States, StatePartitioned)
	case shared && len(t.Holders) > 0:
		t.States = append(t.States, StateShared)
	case len(t.Holders) > 0:
		t.States = append(t.States, StateAllocated)
	default:
		t.States = append(t.States, StateFree)
	}
	if len(t.Taints) > 0 {
		t.States = append(t.States, StateTainted)
	}
	if strings.HasPrefix(t.Health, "Unhealthy") {
		t.States = append(t.States, StateUnhealthy)
	}
	// The most telling state colours the tile.
	t.State = t.States[len(t.States)-1]
}

// claimHolders are the claims holding each device, by driver/pool/device,
// with the part of the device a share holds.
func claimHolders(ctx context.Context, snap *allocation.Snapshot) map[string][]Holder {
	out := map[string][]Holder{}
	for ref, hs := range snap.Holders(ctx) {
		for _, h := range hs {
			part := ""
			if h.ShareID != "" {
				part = "share"
				if h.Consumed != "" {
					part = h.Consumed + " share"
				}
			}
			out[ref] = append(out[ref], Holder{Holder: h, Part: part})
		}
	}
	return out
}

// memorySlices are a partitioned GPU's memory slices with their holders.
func memorySlices(whole resourceapi.Device, migs []resourceapi.Device, prefix string, holders map[string][]Holder) []Slice {
	if len(migs) == 0 || len(whole.ConsumesCounters) == 0 {
		return nil
	}
	n := 0
	for name := range whole.ConsumesCounters[0].Counters {
		if strings.HasPrefix(name, "memory-slice-") {
			n++
		}
	}
	out := make([]Slice, n)
	for i := range out {
		out[i].Index = i
	}
	for _, m := range migs {
		hs := holders[prefix+m.Name]
		if len(hs) == 0 || len(m.ConsumesCounters) == 0 {
			continue
		}
		for name := range m.ConsumesCounters[0].Counters {
			var i int
			if _, err := fmt.Sscanf(name, "memory-slice-%d", &i); err == nil && i < n {
				out[i].Holder = attr(m, gpu.AttrProfile) + " " + strings.Join(hs[0].Pods, ",")
			}
		}
	}
	return out
}

func attr(d resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

func isTrue(b *bool) bool { return b != nil && *b }

func or(s, otherwise string) string {
	if s == "" {
		return otherwise
	}
	return s
}

// poolNodes maps each pool (driver/pool) to its node: its slices', or
// the pool's name for a pool of no node.
func poolNodes(snap *allocation.Snapshot) map[string]string {
	out := map[string]string{}
	for _, s := range snap.Slices {
		k := s.Spec.Driver + "/" + s.Spec.Pool.Name
		if _, ok := out[k]; !ok || s.Spec.NodeName != nil {
			out[k] = ptr.Deref(s.Spec.NodeName, s.Spec.Pool.Name)
		}
	}
	return out
}

// memory is a size in GiB, as GPU memory is spoken of.
func memory(q resource.Quantity) string {
	return fmt.Sprintf("%.0f GiB", float64(q.Value())/(1<<30))
}
