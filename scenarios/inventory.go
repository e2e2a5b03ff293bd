package scenarios

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/conformance/devices"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// Inventory is what the cluster offers, for counts derived from it.
type Inventory struct {
	// Devices counts GPUs published through DRA, by tier.
	Devices map[string]int
	// Counted counts GPUs counted through the device-plugin API, by the
	// tier of their node.
	Counted map[string]int
	// CountedNodes counts the nodes with free counted GPUs, by tier.
	CountedNodes map[string]int
	// Partitioned counts the free GPUs among Devices whose partitions
	// consume their counters; Shared those several claims may share.
	Partitioned map[string]int
	Shared      map[string]int
	// Plain counts the free GPUs among Devices that are neither
	// partitioned, shared nor fabric-attached.
	Plain map[string]int
	// Attached counts the free GPUs among Devices that publish binding
	// conditions (fabric-attached GPUs).
	Attached map[string]int
	// NodeLabels are the labels of the cluster's nodes, as key=value;
	// NodeTaints their taints, as key=value:Effect.
	NodeLabels map[string]bool
	NodeTaints map[string]bool
	// TimeSliced counts the free GPUs among Devices whose counter set
	// also holds MIG devices and time-sliced shares.
	TimeSliced map[string]int
	// Overhead counts the free DRA GPUs per tier that add node resources
	// to a pod (nodeAllocatableResources).
	Overhead map[string]int
	// Partitions counts, by MIG profile, the devices the published
	// counters still allow.
	Partitions map[string]int
	// Shares lists, by tier, what is left of each shared device's memory.
	Shares map[string][]allocation.FreeShare
	// Published counts every GPU published through DRA, free or not, by
	// tier and node.
	Published map[string]map[string]int
	// Groups counts the free GPUs of a tier by attribute and by the
	// attribute's value on one node (pool): tier → attribute → group.
	Groups map[string]map[string]map[string]int
	// Drivers counts the devices each driver publishes, free or not: the
	// GPU driver's and any other's (nic.dralab.dev).
	Drivers map[string]int
	// FreeOnNode counts the free DRA GPUs of a tier by node: a claim's
	// devices are all on one node.
	FreeOnNode map[string]map[string]int
	// NodeLabelsOf are each node's labels, for requirements per domain
	// of a node label.
	NodeLabelsOf map[string]map[string]string
	// Tainted counts the GPUs of a tier that carry a taint, by tier.
	Tainted map[string]int
	// Free lists every free, untainted device on a node, of any driver:
	// for counts of pairs across drivers.
	Free []FreeDevice
}

// FreeDevice is a free device on a node, with its attributes' plain
// values by qualified name (domain/name) and the DeviceClasses it is one
// of.
type FreeDevice struct {
	Driver, Node string
	// Tier is the GPU's tier, "" for any other device.
	Tier       string
	Attributes map[string]string
	Classes    map[string]bool
}

// PairsOf counts, node by node and value by value, how many pairs of a
// free GPU of p.Tier and a free device of the class p.Class agree on the
// attributes p names: on each node and value, the fewer of the two.
func (inv Inventory) PairsOf(p *Pairs) int {
	gpus, others := inv.pairSides(p)
	n := 0
	for k, g := range gpus {
		n += min(g, others[k])
	}
	return n
}

// pairSides counts the free GPUs of p.Tier and the free devices of
// p.Class by node and attribute value, leaving out the values p
// excepts.
func (inv Inventory) pairSides(p *Pairs) (gpus, others map[string]int) {
	gpus, others = map[string]int{}, map[string]int{}
	for _, d := range inv.Free {
		switch {
		case d.Tier == p.Tier && d.Tier != "":
			if v, ok := d.Attributes[p.Attribute]; ok && !slices.Contains(p.Except, v) {
				gpus[d.Node+"/"+v]++
			}
		case d.Tier == "" && d.Classes[p.Class]:
			if v, ok := d.Attributes[p.otherAttribute()]; ok && !slices.Contains(p.Except, v) {
				others[d.Node+"/"+v]++
			}
		}
	}
	return gpus, others
}

// NodesOf counts the nodes with at least one free device of the class
// n.Class whose attribute n.Attribute has the value n.Value.
func (inv Inventory) NodesOf(n *DeviceNodes) int {
	nodes := map[string]bool{}
	for _, d := range inv.Free {
		if d.Classes[n.Class] && d.Attributes[n.Attribute] == n.Value {
			nodes[d.Node] = true
		}
	}
	return len(nodes)
}

// Resolve turns a count into a number.
func (inv Inventory) Resolve(c *Count) int {
	if c.N != nil {
		return *c.N
	}
	n := 0
	for _, t := range c.DevicesOf {
		n += inv.Devices[t]
	}
	for _, t := range c.CountedOf {
		n += inv.Counted[t]
	}
	for _, t := range c.CountedNodesOf {
		n += inv.CountedNodes[t]
	}
	for _, p := range c.PartitionsOf {
		n += inv.Partitions[p]
	}
	for _, t := range c.PartitionedOf {
		n += inv.Partitioned[t]
	}
	if g := c.GroupsOf; g != nil && g.Size > 0 {
		for _, free := range inv.Groups[g.Tier][g.Attribute] {
			n += free / g.Size
		}
	}
	if c.PairsOf != nil {
		n += inv.PairsOf(c.PairsOf)
	}
	if c.NodesOf != nil {
		n += inv.NodesOf(c.NodesOf)
	}
	if sh := c.SharesOf; sh != nil {
		want := resource.MustParse(sh.Memory) // validated when parsed
		for _, f := range inv.Shares[sh.Tier] {
			if want.Sign() > 0 && want.Cmp(f.MaxShare) <= 0 && f.Left.Sign() > 0 {
				n += int(f.Left.Value() / want.Value())
			}
		}
	}
	if c.DivideBy > 1 {
		n /= c.DivideBy
	}
	return n + c.Plus
}

// inventory reads the GPUs free for the scenario, per tier: devices that
// no claim holds and no taint keeps (NoSchedule or NoExecute, on the device
// or from a DeviceTaintRule), and counted GPUs that no pod requests. Scenarios derive
// their counts from it, so they fit any cluster with the tiers they need,
// other workloads included.
func (r *Runner) inventory(ctx context.Context) (Inventory, error) {
	snap, err := allocation.Read(ctx, r.Client, metav1.NamespaceDefault, nodedrivers.Vocabulary)
	if err != nil {
		return Inventory{}, err
	}
	inv := Inventory{Devices: map[string]int{}, Counted: map[string]int{}, CountedNodes: map[string]int{}, Partitioned: map[string]int{}, Shared: map[string]int{}, Attached: map[string]int{}, Overhead: map[string]int{}, TimeSliced: map[string]int{}, NodeLabels: map[string]bool{}, NodeTaints: map[string]bool{}, Plain: map[string]int{}, Partitions: snap.FreePartitions(), Shares: map[string][]allocation.FreeShare{}, Groups: map[string]map[string]map[string]int{}, Published: map[string]map[string]int{}, Drivers: map[string]int{}, FreeOnNode: map[string]map[string]int{}, NodeLabelsOf: map[string]map[string]string{}, Tainted: map[string]int{}}
	shares := map[string]allocation.FreeShare{}
	for _, f := range snap.FreeShares(gpu.CapacityMemory) {
		shares[f.Driver+"/"+f.Pool+"/"+f.Device] = f
	}
	// Free as the allocator counts it: a whole GPU whose MIG devices are
	// taken, or that shares no compatibility group with what runs on it,
	// is not free, though no claim holds it.
	free := snap.FreeDevices(gpu.DriverName)
	// Counter sets (pool/set) with MIG devices, and with time-sliced shares.
	kinds := map[string]map[string]bool{}
	for _, sl := range snap.Slices {
		if sl.Spec.Driver != gpu.DriverName {
			continue
		}
		for _, d := range sl.Spec.Devices {
			for _, cons := range d.ConsumesCounters {
				k := sl.Spec.Pool.Name + "/" + cons.CounterSet
				if kinds[k] == nil {
					kinds[k] = map[string]bool{}
				}
				kinds[k][ptr.Deref(d.Attributes[gpu.AttrType].StringValue, "")] = true
			}
		}
	}
	freeOf := map[string]map[string]bool{gpu.DriverName: free}
	for _, sl := range snap.Slices {
		inv.Drivers[sl.Spec.Driver] += len(sl.Spec.Devices)
		if sl.Spec.Driver != gpu.DriverName {
			if freeOf[sl.Spec.Driver] == nil {
				freeOf[sl.Spec.Driver] = snap.FreeDevices(sl.Spec.Driver)
			}
			for i := range sl.Spec.Devices {
				d := &sl.Spec.Devices[i]
				if freeOf[sl.Spec.Driver][sl.Spec.Driver+"/"+sl.Spec.Pool.Name+"/"+d.Name] && len(snap.Taints(sl.Spec.Driver, sl.Spec.Pool.Name, d)) == 0 {
					inv.addFree(ctx, snap, &sl, d, "")
				}
			}
			continue
		}
		for i := range sl.Spec.Devices {
			key := sl.Spec.Driver + "/" + sl.Spec.Pool.Name + "/" + sl.Spec.Devices[i].Name
			tier, err := nodedrivers.Vocabulary.Tier(ctx, sl.Spec.Driver, &sl.Spec.Devices[i])
			if err != nil {
				return inv, err
			}
			if tier != "" {
				node := ptr.Deref(sl.Spec.NodeName, "")
				if inv.Published[tier] == nil {
					inv.Published[tier] = map[string]int{}
				}
				inv.Published[tier][node]++
			}
			// A tainted device is not the scenario's: its requests do
			// not tolerate the taints gpu:fail and DeviceTaintRules put.
			if tier == "" {
				continue
			}
			if len(snap.Taints(sl.Spec.Driver, sl.Spec.Pool.Name, &sl.Spec.Devices[i])) > 0 {
				inv.Tainted[tier]++
				continue
			}
			if f, ok := shares[key]; ok {
				inv.Shares[tier] = append(inv.Shares[tier], f)
			}
			if !free[key] {
				continue
			}
			inv.Devices[tier]++
			inv.addFree(ctx, snap, &sl, &sl.Spec.Devices[i], tier)
			if node := ptr.Deref(sl.Spec.NodeName, ""); node != "" {
				if inv.FreeOnNode[tier] == nil {
					inv.FreeOnNode[tier] = map[string]int{}
				}
				inv.FreeOnNode[tier][node]++
			}
			inv.addToGroups(tier, sl.Spec.Pool.Name, &sl.Spec.Devices[i])
			if len(sl.Spec.Devices[i].ConsumesCounters) > 0 {
				inv.Partitioned[tier]++
			}
			if ptr.Deref(sl.Spec.Devices[i].AllowMultipleAllocations, false) {
				inv.Shared[tier]++
			}
			if len(sl.Spec.Devices[i].BindingConditions) > 0 {
				inv.Attached[tier]++
			}
			if len(sl.Spec.Devices[i].NodeAllocatableResources) > 0 {
				inv.Overhead[tier]++
			}
			for _, cons := range sl.Spec.Devices[i].ConsumesCounters {
				if k := kinds[sl.Spec.Pool.Name+"/"+cons.CounterSet]; k[gpu.TypeMIG] && k[gpu.TypeTimeSlice] {
					inv.TimeSliced[tier]++
					break
				}
			}
			if d := &sl.Spec.Devices[i]; len(d.ConsumesCounters) == 0 && !ptr.Deref(d.AllowMultipleAllocations, false) && len(d.BindingConditions) == 0 {
				inv.Plain[tier]++
			}
		}
	}
	pods, err := r.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return inv, err
	}
	requested := map[string]int64{}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			q := c.Resources.Limits[v1.ResourceName(gpu.ExtendedResource)]
			requested[p.Spec.NodeName] += q.Value()
		}
	}
	for _, n := range snap.Nodes {
		inv.NodeLabelsOf[n.Name] = n.Labels
		for k, v := range n.Labels {
			inv.NodeLabels[k+"="+v] = true
		}
		for _, t := range n.Spec.Taints {
			inv.NodeTaints[taintString(t)] = true
		}
		q, ok := n.Status.Allocatable[v1.ResourceName(gpu.ExtendedResource)]
		if !ok {
			continue
		}
		if tier := nodedrivers.Vocabulary.NodeTier(n); tier != "" {
			free := int(q.Value() - requested[n.Name])
			inv.Counted[tier] += free
			if free > 0 {
				inv.CountedNodes[tier]++
			}
		}
	}
	return inv, nil
}

// addFree lists a free device on a node, its attributes by qualified
// name and the DeviceClasses it is one of; a device of no one node's pool
// is in no pair.
func (inv *Inventory) addFree(ctx context.Context, snap *allocation.Snapshot, sl *resourceapi.ResourceSlice, d *resourceapi.Device, tier string) {
	node := ptr.Deref(sl.Spec.NodeName, "")
	if node == "" {
		return
	}
	classes := map[string]bool{}
	for name := range snap.Classes {
		if snap.InClass(ctx, name, sl, d) {
			classes[name] = true
		}
	}
	attrs := map[string]string{}
	for name, a := range d.Attributes {
		v, ok := devices.AttributeString(a)
		if !ok {
			continue
		}
		q := string(name)
		if !strings.Contains(q, "/") {
			q = sl.Spec.Driver + "/" + q
		}
		attrs[q] = v
	}
	inv.Free = append(inv.Free, FreeDevice{Driver: sl.Spec.Driver, Node: node, Tier: tier, Attributes: attrs, Classes: classes})
}

// addToGroups counts a free device of tier in the groups of each of its
// attributes with a plain value, on its pool's node.
func (inv Inventory) addToGroups(tier, pool string, d *resourceapi.Device) {
	for name, a := range d.Attributes {
		v, ok := devices.AttributeString(a)
		if !ok {
			continue
		}
		if inv.Groups[tier] == nil {
			inv.Groups[tier] = map[string]map[string]int{}
		}
		if inv.Groups[tier][string(name)] == nil {
			inv.Groups[tier][string(name)] = map[string]int{}
		}
		inv.Groups[tier][string(name)][pool+"/"+v]++
	}
}

func (inv Inventory) meets(req Requirements) error {
	var missing []string
	for _, t := range req.Tiers {
		if inv.Devices[t] == 0 {
			missing = append(missing, fmt.Sprintf("%s GPUs published through DRA", t))
		}
	}
	for _, t := range slices.Sorted(maps.Keys(req.Devices)) {
		if n := req.Devices[t]; inv.Devices[t] < n {
			missing = append(missing, fmt.Sprintf("%d free %s GPUs published through DRA (it has %d)", n, t, inv.Devices[t]))
		}
	}
	// Tiers with at least one GPU of a kind.
	for _, k := range []struct {
		tiers []string
		have  map[string]int
		what  string
	}{
		{req.CountedTiers, inv.Counted, "GPUs counted through the device-plugin API (" + gpu.ExtendedResource + ")"},
		{req.PartitionedTiers, inv.Partitioned, "GPUs published with MIG partitions (partitioning: mig)"},
		{req.PlainTiers, inv.Plain, "GPUs that are neither partitioned, shared nor fabric-attached"},
		{req.SharedTiers, inv.Shared, "GPUs shared by memory (sharing: memory)"},
		{req.AttachedTiers, inv.Attached, "GPUs attached through a fabric, with binding conditions (attach: fabric)"},
		{req.OverheadTiers, inv.Overhead, "GPUs that add node resources to a pod, such as a host-memory overhead (nodeAllocatableResources: the DRANodeAllocatableResources gate, as lab/examples/frontier.yaml has it)"},
	} {
		for _, t := range k.tiers {
			if k.have[t] == 0 {
				missing = append(missing, t+" "+k.what)
			}
		}
	}
	for _, l := range req.NodeLabels {
		if !inv.NodeLabels[l] {
			missing = append(missing, "a node labelled "+l)
		}
	}
	for _, t := range req.NodeTaints {
		if !inv.NodeTaints[t] {
			missing = append(missing, "a node tainted "+t)
		}
	}
	for _, t := range req.TimeSlicedTiers {
		// A claim cannot name the GPU another claim got: with two such
		// GPUs, the second kind would go to the other one.
		if n := inv.TimeSliced[t]; n != 1 {
			missing = append(missing, fmt.Sprintf("exactly one free %s GPU offering MIG devices and time-sliced shares that exclude each other (partitioning: mig and timeSlices, with the DRADeviceCompatibilityGroups gate, as lab/examples/frontier.yaml has it; it has %d)", t, n))
		}
	}
	for _, t := range req.UntaintedTiers {
		if n := inv.Tainted[t]; n > 0 {
			missing = append(missing, fmt.Sprintf("no tainted %s GPU (it has %d: an All claim with admin access takes a node's every one, and the device taint manager evicts its pod from a NoExecute one)", t, n))
		}
	}
	for _, d := range req.Drivers {
		if inv.Drivers[d] == 0 {
			missing = append(missing, fmt.Sprintf("devices of the driver %s", d))
		}
	}
	for _, n := range req.Nodes {
		if got := inv.nodesWith(n.Tier, n.Devices); got < n.count() {
			missing = append(missing, fmt.Sprintf("%d nodes with %d free %s GPUs each, as a claim's devices are on one node (it has %d: %s)", n.count(), n.Devices, n.Tier, got, perNode(inv.FreeOnNode[n.Tier])))
		}
	}
	for _, p := range req.Pairs {
		pairs := inv.PairsOf(&p.Pairs)
		gpus := 0
		for _, d := range inv.Free {
			if d.Tier == p.Tier {
				gpus++
			}
		}
		switch {
		case pairs == 0:
			missing = append(missing, fmt.Sprintf("a free %s GPU and a free %s device agreeing on %s on one node", p.Tier, p.Class, pairAttributes(&p.Pairs)))
		case p.Spare && gpus <= pairs:
			missing = append(missing, fmt.Sprintf("more free %s GPUs than the %d that have a free %s device agreeing on %s beside them (it has %d)", p.Tier, pairs, p.Class, pairAttributes(&p.Pairs), gpus))
		}
	}
	if d := req.Domains; d != nil {
		domains := inv.domains(d.Label, d.Tier)
		if len(domains) != d.Count || slices.ContainsFunc(slices.Collect(maps.Values(domains)), func(n int) bool { return n != d.Devices }) {
			missing = append(missing, fmt.Sprintf("exactly %d domains of node label %s with exactly %d free %s GPUs each (it has %s)", d.Count, d.Label, d.Devices, d.Tier, perNode(domains)))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: it needs %s; the cluster has DRA GPUs %v (partitioned %v, shared %v, fabric-attached %v) and counted GPUs %v",
			ErrUnmet, strings.Join(missing, ", "), inv.Devices, inv.Partitioned, inv.Shared, inv.Attached, inv.Counted)
	}
	return nil
}

// pairAttributes names the attributes a pair agrees on.
func pairAttributes(p *Pairs) string {
	s := p.Attribute
	if p.ClassAttribute != "" {
		s += " (" + p.ClassAttribute + " on the other)"
	}
	if len(p.Except) > 0 {
		s += fmt.Sprintf(", other than %v", p.Except)
	}
	return s
}

// nodesWith counts the nodes with at least n free DRA GPUs of tier.
func (inv Inventory) nodesWith(tier string, n int) int {
	count := 0
	for _, free := range inv.FreeOnNode[tier] {
		if free >= n {
			count++
		}
	}
	return count
}

// domains counts the free DRA GPUs of tier by the value of a node label;
// a node without the label is in no domain.
func (inv Inventory) domains(label, tier string) map[string]int {
	out := map[string]int{}
	for node, free := range inv.FreeOnNode[tier] {
		if v, ok := inv.NodeLabelsOf[node][label]; ok {
			out[v] += free
		}
	}
	return out
}

// perNode says a count per node (or domain): "n1 8, n2 2", or "none".
func perNode(counts map[string]int) string {
	var words []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		words = append(words, fmt.Sprintf("%s %d", k, counts[k]))
	}
	if len(words) == 0 {
		return "none"
	}
	return strings.Join(words, ", ")
}

// taintString is a taint as kubectl writes it: key=value:Effect, or
// key:Effect without a value.
func taintString(t v1.Taint) string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}
