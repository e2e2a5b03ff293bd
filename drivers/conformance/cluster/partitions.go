package cluster

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
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// pool is what one node publishes for a pool: its devices and its
// counter sets, by set and counter name.
type pool struct {
	node, name string
	devices    []device
	counters   map[string]map[string]resource.Quantity
}

// nodePools returns the driver's pools of node, newest generation.
func nodePools(ctx context.Context, client kubernetes.Interface, driver, node string) (map[string]*pool, error) {
	current, err := nodeSlices(ctx, client, driver, node)
	if err != nil {
		return nil, err
	}
	out := map[string]*pool{}
	for _, s := range current {
		p := out[s.Spec.Pool.Name]
		if p == nil {
			p = &pool{node: node, name: s.Spec.Pool.Name, counters: map[string]map[string]resource.Quantity{}}
			out[p.name] = p
		}
		for _, d := range s.Spec.Devices {
			p.devices = append(p.devices, device{driver: driver, pool: p.name, dev: d})
		}
		for _, set := range s.Spec.SharedCounters {
			p.counters[set.Name] = map[string]resource.Quantity{}
			for name, c := range set.Counters {
				p.counters[set.Name][name] = c.Value
			}
		}
	}
	return out, nil
}

// driverNodes lists the nodes the driver's devices reach: those it
// publishes node-local slices for, and those its node selectors and
// allNodes place devices on.
func driverNodes(ctx context.Context, client kubernetes.Interface, driver string) ([]string, error) {
	st, err := nodeState(ctx, client, driver, "")
	if err != nil {
		return nil, err
	}
	var nodes []string
	for i := range st.Slices {
		sl := &st.Slices[i]
		if sl.Spec.Driver != driver {
			continue
		}
		for _, n := range st.Reached(sl, nil) {
			if !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
	}
	slices.Sort(nodes)
	return nodes, nil
}

// selected returns the devices of a class, narrowed by a CEL selector.
func selected(ctx context.Context, client kubernetes.Interface, class, selector string, devs []device) ([]device, error) {
	out, err := classDevices(ctx, client, class, devs)
	if err != nil || selector == "" {
		return out, err
	}
	sel, err := devices.CompileSelectors(selector)
	if err != nil {
		return nil, fmt.Errorf("selector %s: %w", selector, err)
	}
	return selectedBy(ctx, sel, out)
}

// allocations lists every allocation result of the driver's pool, in any
// claim, without admin access: what holds its devices and counters.
func allocations(ctx context.Context, client kubernetes.Interface, driver, poolName string) ([]resourceapi.DeviceRequestAllocationResult, error) {
	claims, err := client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []resourceapi.DeviceRequestAllocationResult
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == driver && r.Pool == poolName && !ptr.Deref(r.AdminAccess, false) {
				out = append(out, r)
			}
		}
	}
	return out, nil
}

// remaining is what the pool's counters have left once every allocated
// device's consumption is taken, once per device: the shares of a device
// that allows multiple allocations (results with distinct shareIDs, in one
// claim or several) consume its counters once, as in Kubernetes'
// allocator. A negative counter is an overcommit, reported as an error
// naming it.
func (p *pool) remaining(allocated []resourceapi.DeviceRequestAllocationResult) (map[string]map[string]resource.Quantity, error) {
	left := map[string]map[string]resource.Quantity{}
	for set, counters := range p.counters {
		left[set] = maps.Clone(counters)
	}
	for _, dev := range allocatedDevices(allocated) {
		i := slices.IndexFunc(p.devices, func(d device) bool { return d.dev.Name == dev })
		if i < 0 {
			return nil, fmt.Errorf("device %s/%s is allocated but not published", p.name, dev)
		}
		for _, c := range p.devices[i].dev.ConsumesCounters {
			for name, n := range c.Counters {
				q, ok := left[c.CounterSet][name]
				if !ok {
					return nil, fmt.Errorf("device %s/%s consumes counter %s of set %s, which the pool does not publish", p.name, dev, name, c.CounterSet)
				}
				q.Sub(n.Value)
				left[c.CounterSet][name] = q
			}
		}
	}
	var over []string
	for _, set := range slices.Sorted(maps.Keys(left)) {
		for _, name := range slices.Sorted(maps.Keys(left[set])) {
			if q := left[set][name]; q.Sign() < 0 {
				total := p.counters[set][name]
				over = append(over, fmt.Sprintf("%s/%s: %s consumed of %s", set, name, sum(total, q), total.String()))
			}
		}
	}
	if len(over) > 0 {
		return left, fmt.Errorf("overcommit in pool %s: %s", p.name, strings.Join(over, ", "))
	}
	return left, nil
}

// allocatedDevices names the devices of a pool's allocation results, each
// once, in the order first allocated: a device shared by several claims is
// one device.
func allocatedDevices(allocated []resourceapi.DeviceRequestAllocationResult) []string {
	var out []string
	for _, r := range allocated {
		if !slices.Contains(out, r.Device) {
			out = append(out, r.Device)
		}
	}
	return out
}

// sum returns total minus left, in words.
func sum(total, left resource.Quantity) string {
	total.Sub(left)
	return total.String()
}

// blocker names a counter whose remainder is less than d consumes, or ""
// when d fits.
func blocker(d device, left map[string]map[string]resource.Quantity) string {
	for _, c := range d.dev.ConsumesCounters {
		for _, name := range slices.Sorted(maps.Keys(c.Counters)) {
			if q := left[c.CounterSet][name]; q.Cmp(c.Counters[name].Value) < 0 {
				return fmt.Sprintf("%s/%s (%s left, %s needs %s)", c.CounterSet, name, q.String(), d.dev.Name, ptr.To(c.Counters[name].Value).String())
			}
		}
	}
	return ""
}

// partitionsOn finds a node whose pools publish counters and partitions of
// the manifest's class (and selector) consuming them, and returns that
// pool; the node with the most partitions, so that the check exhausts a
// real set of counters.
func (k *kit) partitionsOn(ctx context.Context) (*pool, []device, error) {
	spec := k.m.Partitions
	nodes, err := driverNodes(ctx, k.client, k.m.Driver)
	if err != nil {
		return nil, nil, err
	}
	var best *pool
	var bestParts []device
	for _, node := range nodes {
		pools, err := nodePools(ctx, k.client, k.m.Driver, node)
		if err != nil {
			return nil, nil, err
		}
		for _, name := range slices.Sorted(maps.Keys(pools)) {
			p := pools[name]
			parts, err := selected(ctx, k.client, spec.DeviceClass, spec.Selector, p.devices)
			if err != nil {
				return nil, nil, fmt.Errorf("the manifest's partitions: %w", err)
			}
			parts = slices.DeleteFunc(parts, func(d device) bool { return len(d.dev.ConsumesCounters) == 0 })
			if len(parts) > len(bestParts) {
				best, bestParts = p, parts
			}
		}
	}
	if best == nil {
		return nil, nil, skipCheck{fmt.Sprintf("no node publishes devices of class %s%s that consume counters: nothing to partition", spec.DeviceClass, selectorWords(spec.Selector))}
	}
	return best, bestParts, nil
}

func selectorWords(selector string) string {
	if selector == "" {
		return ""
	}
	return " with " + selector
}

// partitions: on the node with the most partitions, claims for one
// partition each are allocated until one waits. Every pod holding one
// proves its partition; the counters are never overcommitted; the waiting
// claim stays unallocated while every partition it could take needs more
// than the counters have left, and gets one once a partition is freed.
func (s *suite) partitions(ctx context.Context, logf logFunc, k *kit) error {
	spec := s.m.Partitions
	proof := s.m.Proof
	if spec.Proof != nil {
		proof = *spec.Proof
	}
	p, parts, err := k.partitionsOn(ctx)
	if err != nil {
		return err
	}
	held, err := allocations(ctx, k.client, s.m.Driver, p.name)
	if err != nil {
		return err
	}
	if len(held) > 0 {
		return fmt.Errorf("pool %s of node %s has %d devices allocated before the check: it needs the node's counters whole", p.name, p.node, len(allocatedDevices(held)))
	}
	onNode := onNodes([]string{p.node})
	req := resourceapi.DeviceRequest{Name: "part", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: spec.DeviceClass}}
	if spec.Selector != "" {
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: spec.Selector}}}
	}
	var running []string
	waiting := ""
	// One more than there are partitions: the counters must stop them
	// before the devices run out, or the check fails.
	for i := 0; i <= len(parts) && waiting == ""; i++ {
		name := fmt.Sprintf("part-%d", i)
		if err := k.createClaim(ctx, name, req); err != nil {
			return err
		}
		if err := k.pod(ctx, name, []string{name}, onNode); err != nil {
			return err
		}
		allocated, err := k.allocatedOrUnschedulable(ctx, name)
		if err != nil {
			return err
		}
		if !allocated {
			waiting = name
			break
		}
		running = append(running, name)
	}
	switch {
	case waiting == "":
		return fmt.Errorf("all %d partitions of pool %s were allocated at once: their counters never ran out", len(parts), p.name)
	case len(running) == 0:
		return fmt.Errorf("the first claim for a partition of pool %s waits: %s", p.name, waiting)
	}
	var proofs []string
	for _, name := range running {
		v, err := k.proofWith(ctx, name, proof)
		if err != nil {
			return err
		}
		proofs = append(proofs, v)
	}
	allocated, err := allocations(ctx, k.client, s.m.Driver, p.name)
	if err != nil {
		return err
	}
	left, err := p.remaining(allocated)
	if err != nil {
		return err
	}
	// The devices allocated, each once: two claims may share one.
	got := allocatedDevices(allocated)
	// Evidence that the counters hold the claim back: every partition it
	// could take needs more than they have left, and they hold back at
	// least one device of the pool (a driver whose partitions overlap in
	// nothing would let the devices run out, not the counters).
	blocked := 0
	for _, d := range p.devices {
		if len(d.dev.ConsumesCounters) == 0 || slices.Contains(got, d.dev.Name) {
			continue
		}
		switch {
		case blocker(d, left) != "":
			blocked++
		case slices.ContainsFunc(parts, func(o device) bool { return o.dev.Name == d.dev.Name }):
			return fmt.Errorf("claim %s waits, yet partition %s fits the counters left after %v", waiting, d.dev.Name, got)
		}
	}
	if blocked == 0 {
		return fmt.Errorf("claim %s waits, yet the counters of pool %s hold back no device after %v: the partitions ran out, not the counters", waiting, p.name, got)
	}
	if c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, waiting, metav1.GetOptions{}); err != nil {
		return err
	} else if c.Status.Allocation != nil {
		return fmt.Errorf("claim %s was allocated %v while its pod was unschedulable", waiting, c.Status.Allocation.Devices.Results)
	}
	logf("node %s: %d partitions allocated (%v), proofs %v; claim %s waits, %d devices of the pool held back by counters: %s", p.node, len(running), got, proofs, waiting, blocked, blockers(p.devices, got, left))
	// The counters, not something else, held it back: freeing one
	// partition lets it run.
	if err := k.remove(ctx, running[:1], running[:1]); err != nil {
		return err
	}
	if _, err := k.proofWith(ctx, waiting, proof); err != nil {
		return fmt.Errorf("after %s was freed: %w", running[0], err)
	}
	logf("once %s was freed, %s got a partition", running[0], waiting)
	return nil
}

// blockers says, for a message, which counters keep the devices not
// allocated off the node.
func blockers(parts []device, got []string, left map[string]map[string]resource.Quantity) string {
	var out []string
	for _, d := range parts {
		if b := blocker(d, left); b != "" && !slices.Contains(got, d.dev.Name) {
			out = append(out, b)
		}
	}
	if len(out) > 3 {
		out = append(out[:3], fmt.Sprintf("and %d more", len(out)-3))
	}
	return strings.Join(out, "; ")
}

// allocatedOrUnschedulable waits until the pod's claim is allocated (true)
// or the scheduler finds the pod unschedulable (false).
func (k *kit) allocatedOrUnschedulable(ctx context.Context, name string) (bool, error) {
	var allocated bool
	err := poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("claim %s to be allocated or its pod found unschedulable", name), func(ctx context.Context) (string, bool, error) {
		c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		if c.Status.Allocation != nil {
			allocated = true
			return "allocated", true, nil
		}
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		// Unschedulable for the cluster's reasons, not the counters'.
		if err := k.keptOff(ctx, pod); err != nil {
			return podState(pod), false, err
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
				return podState(pod), true, nil
			}
		}
		return "claim not allocated; pod: " + podState(pod), false, nil
	})
	return allocated, err
}

// shares: two claims, each asking the manifest's request of one shareable
// device, are both allocated that device with distinct shareIDs, each
// consuming at least its request, and the device's capacity covers what
// every claim holding it consumes; both pods prove the device.
func (s *suite) shares(ctx context.Context, logf logFunc, k *kit) error {
	spec := s.m.Shares
	d, node, pin, err := k.shareable(ctx)
	if err != nil {
		return err
	}
	req := resourceapi.DeviceRequest{Name: "share", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: spec.DeviceClass,
		Capacity:        &resourceapi.CapacityRequirements{Requests: maps.Clone(spec.Request)},
	}}
	for _, e := range []string{spec.Selector, pin} {
		if e != "" {
			req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
		}
	}
	names := []string{"share-a", "share-b"}
	var results []resourceapi.DeviceRequestAllocationResult
	for _, name := range names {
		if err := k.createClaim(ctx, name, req); err != nil {
			return err
		}
		if err := k.pod(ctx, name, []string{name}, onNodes([]string{node})); err != nil {
			return err
		}
		if _, err := k.proof(ctx, name); err != nil {
			return err
		}
		r, err := k.claimResults(ctx, name)
		if err != nil {
			return err
		}
		if len(r) != 1 || r[0].Driver != d.driver || r[0].Pool != d.pool || r[0].Device != d.dev.Name {
			return fmt.Errorf("claim %s (selector %s) got %v, want device %s/%s", name, pin, r, d.pool, d.dev.Name)
		}
		results = append(results, r[0])
	}
	for i, r := range results {
		if r.ShareID == nil || *r.ShareID == "" {
			return fmt.Errorf("claim %s got %s/%s without a shareID", names[i], r.Pool, r.Device)
		}
		for name, want := range spec.Request {
			if got, ok := r.ConsumedCapacity[name]; !ok || got.Cmp(want) < 0 {
				return fmt.Errorf("claim %s consumes %v of %s/%s, want at least %s of %s", names[i], r.ConsumedCapacity, r.Pool, r.Device, want.String(), name)
			}
		}
	}
	if *results[0].ShareID == *results[1].ShareID {
		return fmt.Errorf("claims %s and %s share %s/%s with the same shareID %s", names[0], names[1], d.pool, d.dev.Name, *results[0].ShareID)
	}
	all, err := allocations(ctx, k.client, s.m.Driver, d.pool)
	if err != nil {
		return err
	}
	consumed := map[resourceapi.QualifiedName]resource.Quantity{}
	for _, r := range all {
		if r.Device != d.dev.Name {
			continue
		}
		for name, q := range r.ConsumedCapacity {
			c := consumed[name]
			c.Add(q)
			consumed[name] = c
		}
	}
	for _, name := range slices.Sorted(maps.Keys(consumed)) {
		if c, total := consumed[name], d.dev.Capacity[name].Value; c.Cmp(total) > 0 {
			return fmt.Errorf("device %s/%s: its claims consume %s of %s, more than its %s", d.pool, d.dev.Name, c.String(), name, total.String())
		}
	}
	logf("claims %v share %s/%s on node %s with shareIDs %s and %s, consuming %v of it (capacity %v)",
		names, d.pool, d.dev.Name, node, *results[0].ShareID, *results[1].ShareID, quantities(consumed), capacities(d.dev.Capacity))
	return nil
}

// shareable finds a free device that allows multiple allocations, of the
// manifest's shares class and selector, with room for two requests, and a
// selector naming it among its node's devices.
func (k *kit) shareable(ctx context.Context) (device, string, string, error) {
	spec := k.m.Shares
	d, node, expr, reasons, err := k.pinnable(ctx, "shares", spec.DeviceClass, spec.Selector, func(d device) (bool, string) {
		if !ptr.Deref(d.dev.AllowMultipleAllocations, false) {
			return false, ""
		}
		if short := roomForTwo(d, spec.Request); short != "" {
			return false, short
		}
		return true, ""
	})
	if err != nil || expr != "" {
		return d, node, expr, err
	}
	return device{}, "", "", skipCheck{fmt.Sprintf("no device of class %s%s allows multiple allocations with room for two requests of %v%s",
		spec.DeviceClass, selectorWords(spec.Selector), quantities(spec.Request), strings.Join(append([]string{""}, reasons...), "; "))}
}

// pinnable finds, over the driver's nodes, a free device of class (and
// selector) that fits, and a CEL selector naming it among its node's
// devices, by an attribute no other device of the node shares. fit says
// whether a device fits, and why not where that is worth telling; a free
// device no attribute tells apart is a reason too. Nothing found is no
// error: the reasons are returned for the caller's. what names the
// manifest's section in errors.
func (k *kit) pinnable(ctx context.Context, what, class, selector string, fit func(device) (bool, string)) (device, string, string, []string, error) {
	nodes, err := driverNodes(ctx, k.client, k.m.Driver)
	if err != nil {
		return device{}, "", "", nil, err
	}
	var reasons []string
	for _, node := range nodes {
		devs, err := nodeDevices(ctx, k.client, k.m.Driver, node)
		if err != nil {
			return device{}, "", "", nil, err
		}
		candidates, err := selected(ctx, k.client, class, selector, devs)
		if err != nil {
			return device{}, "", "", nil, fmt.Errorf("the manifest's %s: %w", what, err)
		}
		for _, d := range candidates {
			if ok, why := fit(d); !ok {
				if why != "" {
					reasons = append(reasons, why)
				}
				continue
			}
			held, err := allocations(ctx, k.client, k.m.Driver, d.pool)
			if err != nil {
				return device{}, "", "", nil, err
			}
			if slices.ContainsFunc(held, func(r resourceapi.DeviceRequestAllocationResult) bool { return r.Device == d.dev.Name }) {
				reasons = append(reasons, fmt.Sprintf("%s/%s is in use", d.pool, d.dev.Name))
				continue
			}
			for _, name := range slices.Sorted(maps.Keys(d.dev.Attributes)) {
				expr, same, ok := sameAttribute(d, name)
				if ok && len(slices.DeleteFunc(slices.Clone(devs), func(o device) bool { return !same(o) })) == 1 {
					return d, node, expr, nil, nil
				}
			}
			reasons = append(reasons, fmt.Sprintf("no attribute of %s/%s tells it from the other devices of node %s", d.pool, d.dev.Name, node))
		}
	}
	return device{}, "", "", reasons, nil
}

// roomForTwo says why d's capacity cannot hold two requests, or "".
func roomForTwo(d device, request map[resourceapi.QualifiedName]resource.Quantity) string {
	for _, name := range slices.Sorted(maps.Keys(request)) {
		c, ok := d.dev.Capacity[name]
		if !ok {
			return fmt.Sprintf("%s/%s has no capacity %s", d.pool, d.dev.Name, name)
		}
		two := request[name].DeepCopy()
		two.Add(request[name])
		if c.Value.Cmp(two) < 0 {
			return fmt.Sprintf("%s/%s has %s of %s, less than two requests", d.pool, d.dev.Name, c.Value.String(), name)
		}
	}
	return ""
}

func quantities(q map[resourceapi.QualifiedName]resource.Quantity) string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(q)) {
		out = append(out, fmt.Sprintf("%s: %s", name, ptr.To(q[name]).String()))
	}
	return "{" + strings.Join(out, ", ") + "}"
}

func capacities(c map[resourceapi.QualifiedName]resourceapi.DeviceCapacity) string {
	q := map[resourceapi.QualifiedName]resource.Quantity{}
	for name, v := range c {
		q[name] = v.Value
	}
	return quantities(q)
}

// plainNodes lists the nodes whose devices of the manifest's class neither
// consume counters nor allow multiple allocations, and are prepared (not
// quietNodes).
func (k *kit) plainNodes(ctx context.Context) ([]string, error) {
	nodes, err := driverNodes(ctx, k.client, k.m.Driver)
	if err != nil {
		return nil, err
	}
	quiet, err := k.quietNodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, node := range nodes {
		if slices.Contains(quiet, node) {
			continue
		}
		devs, err := nodeDevices(ctx, k.client, k.m.Driver, node)
		if err != nil {
			return nil, err
		}
		devs, err = classDevices(ctx, k.client, k.m.DeviceClass, devs)
		if err != nil {
			return nil, err
		}
		special := slices.ContainsFunc(devs, func(d device) bool {
			return len(d.dev.ConsumesCounters) > 0 || ptr.Deref(d.dev.AllowMultipleAllocations, false)
		})
		if len(devs) > 0 && !special {
			out = append(out, node)
		}
	}
	return out, nil
}
