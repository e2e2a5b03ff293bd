package soak

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/drivers/kit"
	"github.com/dralab/dralab/internal/nodedrivers"
)

// Invariants the soak checks.
const (
	// InvExclusive: no device allocated whole is in two claims at once.
	InvExclusive = "exclusive-allocation"
	// InvCapacity: no shared device is allocated beyond its capacity, and
	// no counter set of a partitioned device beyond its counters.
	InvCapacity = "shared-capacity"
	// InvCheckpoint: every claim prepared in a driver's checkpoint exists
	// and is allocated to that driver's node.
	InvCheckpoint = "checkpoint-allocated"
	// InvPreparedOnce: after settle, every allocated, reserved claim whose
	// pod runs is prepared exactly once, on the pod's node, with the
	// devices of its allocation.
	InvPreparedOnce = "prepared-once"
	// InvCDI: no CDI spec file remains for a claim that no longer exists.
	InvCDI = "cdi-spec-owned"
	// InvPods: every pod runs, or is Pending with a reason the report
	// names; none waits for its containers or its end past a bound.
	InvPods = "pods-accounted"
	// InvResume: a lab killed and brought up again keeps its claims'
	// allocations.
	InvResume = "allocations-survive-restart"
	// InvLabHealthy: after settle, every process of the lab runs and every
	// node is Ready.
	InvLabHealthy = "lab-healthy"
	// InvLeftovers: after lab:down nothing of the lab remains: process,
	// listener, mount, state directory.
	InvLeftovers = "nothing-left-after-down"
)

// finding is what one check found wrong: a violation once confirmed.
type finding struct {
	invariant string
	// key identifies the finding across checks (invariant and objects).
	key     string
	message string
	objects []string
}

func newFinding(invariant, message string, objects ...string) finding {
	sort.Strings(objects)
	return finding{invariant: invariant, key: invariant + " " + strings.Join(objects, " ") + " " + message, message: message, objects: objects}
}

// observation is the cluster and the drivers' files as read at one time.
type observation struct {
	at     time.Time
	pods   []v1.Pod
	claims []resourceapi.ResourceClaim
	slices []resourceapi.ResourceSlice
	nodes  []v1.Node
	// classes and rules let the report explain pending pods.
	classes []resourceapi.DeviceClass
	rules   []resourceapi.DeviceTaintRule
	// checkpoints are the GPU drivers' checkpoints by node (nodes whose
	// driver has written none are absent); cdiSpecs the CDI spec files
	// of each node's CDI directory.
	checkpoints map[string]*kit.Checkpoint
	cdiSpecs    map[string][]string
}

// bounds are how long a pod may wait before it counts as stuck.
type bounds struct {
	// containerCreating: from being scheduled to running.
	containerCreating time.Duration
	// terminating: from deletion to gone.
	terminating time.Duration
	// unexplained: from creation to a reason for being unscheduled.
	unexplained time.Duration
}

// check is one invariant's evaluation of an observation.
type check struct {
	name string
	run  func(context.Context, *observation) ([]finding, error)
}

// continuousChecks hold at every moment of the soak. Those whose objects
// the cluster changes one after the other (a checkpoint and the claim it
// names) are only violations when seen twice (see checker).
func continuousChecks(b bounds) []check {
	return []check{
		{InvExclusive, func(_ context.Context, o *observation) ([]finding, error) { return exclusive(o), nil }},
		{InvCapacity, func(_ context.Context, o *observation) ([]finding, error) { return capacity(o), nil }},
		{InvCheckpoint, func(_ context.Context, o *observation) ([]finding, error) { return checkpointed(o), nil }},
		{InvCDI, func(_ context.Context, o *observation) ([]finding, error) { return cdiOwned(o), nil }},
		{InvPods, func(ctx context.Context, o *observation) ([]finding, error) { return podsAccounted(ctx, o, b) }},
	}
}

// settledChecks hold once the soak has stopped churning and injecting
// faults and the cluster has settled.
func settledChecks() []check {
	return append(continuousChecks(bounds{}),
		check{InvPreparedOnce, func(_ context.Context, o *observation) ([]finding, error) { return preparedOnce(o), nil }})
}

// deviceKey names a device: driver/pool/device.
func deviceKey(driver, pool, device string) string { return driver + "/" + pool + "/" + device }

func claimRef(c *resourceapi.ResourceClaim) string {
	return "resourceclaim " + c.Namespace + "/" + c.Name + " (" + string(c.UID) + ")"
}

func podRef(p *v1.Pod) string { return "pod " + p.Namespace + "/" + p.Name }

// exclusive finds devices allocated whole (no share ID, no admin access)
// to more than one claim.
func exclusive(o *observation) []finding {
	holders := map[string][]string{}
	for i := range o.claims {
		c := &o.claims[i]
		if c.Status.Allocation == nil {
			continue
		}
		seen := map[string]bool{}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.ShareID != nil || ptr.Deref(r.AdminAccess, false) {
				continue
			}
			key := deviceKey(r.Driver, r.Pool, r.Device)
			if !seen[key] {
				seen[key] = true
				holders[key] = append(holders[key], claimRef(c))
			}
		}
	}
	var out []finding
	for dev, claims := range holders {
		if len(claims) > 1 {
			out = append(out, newFinding(InvExclusive, fmt.Sprintf("device %s is allocated whole to %d claims", dev, len(claims)), append(claims, "device "+dev)...))
		}
	}
	return out
}

// capacity finds shared devices whose shares consume more than the
// device's capacity, and counter sets (a partitioned GPU's) whose
// allocated devices consume more than the set holds.
func capacity(o *observation) []finding {
	devices := map[string]*resourceapi.Device{}
	counters := map[string]resource.Quantity{}
	for i := range o.slices {
		s := &o.slices[i]
		for j := range s.Spec.Devices {
			devices[deviceKey(s.Spec.Driver, s.Spec.Pool.Name, s.Spec.Devices[j].Name)] = &s.Spec.Devices[j]
		}
		for _, set := range s.Spec.SharedCounters {
			for name, c := range set.Counters {
				counters[deviceKey(s.Spec.Driver, s.Spec.Pool.Name, set.Name)+"/"+name] = c.Value
			}
		}
	}
	consumed := map[string]*resource.Quantity{}
	users := map[string][]string{}
	add := func(key string, q resource.Quantity, claim string) {
		if consumed[key] == nil {
			consumed[key] = &resource.Quantity{}
		}
		consumed[key].Add(q)
		if !slices.Contains(users[key], claim) {
			users[key] = append(users[key], claim)
		}
	}
	// A device consumes its counters once, however many claims hold a
	// share of it, as the allocator counts them.
	counted := map[string]bool{}
	for i := range o.claims {
		c := &o.claims[i]
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			key := deviceKey(r.Driver, r.Pool, r.Device)
			if r.ShareID != nil {
				for name, q := range r.ConsumedCapacity {
					add(key+"/capacity/"+string(name), q, claimRef(c))
				}
			}
			if dev := devices[key]; dev != nil && !counted[key] {
				counted[key] = true
				for _, cc := range dev.ConsumesCounters {
					for name, q := range cc.Counters {
						add(deviceKey(r.Driver, r.Pool, cc.CounterSet)+"/"+name, q.Value, claimRef(c)+" via "+r.Device)
					}
				}
			}
		}
	}
	var out []finding
	for key, used := range consumed {
		var limit resource.Quantity
		if dev, name, ok := strings.Cut(key, "/capacity/"); ok {
			d := devices[dev]
			if d == nil {
				continue // the device's slice is being replaced
			}
			limit = d.Capacity[resourceapi.QualifiedName(name)].Value
		} else {
			var ok bool
			if limit, ok = counters[key]; !ok {
				continue
			}
		}
		if used.Cmp(limit) > 0 {
			out = append(out, newFinding(InvCapacity, fmt.Sprintf("%s: %s allocated of %s", key, used.String(), limit.String()), users[key]...))
		}
	}
	return out
}

// allocatedTo tells whether a claim's allocation is for the node.
func allocatedTo(c *resourceapi.ResourceClaim, node *v1.Node) bool {
	if c.Status.Allocation == nil {
		return false
	}
	sel := c.Status.Allocation.NodeSelector
	if sel == nil {
		return true // network-attached devices: any node
	}
	ok, err := nodeaffinity.NewLazyErrorNodeSelector(sel).Match(node)
	return err == nil && ok
}

func (o *observation) node(name string) *v1.Node {
	for i := range o.nodes {
		if o.nodes[i].Name == name {
			return &o.nodes[i]
		}
	}
	// Not (yet) registered: what the node would be named by.
	return &v1.Node{}
}

func (o *observation) claimsByUID() map[types.UID]*resourceapi.ResourceClaim {
	out := make(map[types.UID]*resourceapi.ResourceClaim, len(o.claims))
	for i := range o.claims {
		out[o.claims[i].UID] = &o.claims[i]
	}
	return out
}

// checkpointed finds claims a driver's checkpoint holds as prepared that
// do not exist, or are not allocated to the driver's node.
func checkpointed(o *observation) []finding {
	claims := o.claimsByUID()
	var out []finding
	for node, cp := range o.checkpoints {
		for uid, pc := range cp.Claims {
			ref := fmt.Sprintf("claim %s/%s (%s) in node %s's checkpoint", pc.Namespace, pc.Name, uid, node)
			c := claims[uid]
			switch {
			case c == nil:
				out = append(out, newFinding(InvCheckpoint, "prepared, but the claim does not exist", ref))
			case !allocatedTo(c, o.node(node)):
				out = append(out, newFinding(InvCheckpoint, "prepared, but the claim is not allocated to the node", ref, claimRef(c)))
			}
		}
	}
	return out
}

// uidPattern finds a claim's UID in a CDI spec file's name: the driver
// names a claim's transient spec after it.
var uidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// cdiOwned finds CDI spec files of claims that no longer exist.
func cdiOwned(o *observation) []finding {
	claims := o.claimsByUID()
	var out []finding
	for node, files := range o.cdiSpecs {
		for _, f := range files {
			uid := uidPattern.FindString(f)
			if uid != "" && claims[types.UID(uid)] == nil {
				out = append(out, newFinding(InvCDI, "CDI spec of a claim that does not exist", fmt.Sprintf("node %s: %s", node, f)))
			}
		}
	}
	return out
}

// podsAccounted finds pods that failed, wait for their containers or
// their end longer than the bounds allow, or are unscheduled with no
// reason the report can name. With zero bounds (after settle) no wait is
// allowed.
func podsAccounted(ctx context.Context, o *observation, b bounds) ([]finding, error) {
	snap := allocation.NewSnapshot(nodedrivers.Vocabulary, "", slices.Clone(o.pods), o.claims, o.slices, o.classes, o.rules, o.nodes)
	rows, err := snap.Rows(ctx)
	if err != nil {
		return nil, fmt.Errorf("explaining pending pods: %w", err)
	}
	reasons := map[string]string{}
	for _, r := range rows {
		if r.ReasonCode != "" {
			reasons[r.Namespace+"/"+r.Pod] = r.ReasonCode
		}
	}
	var out []finding
	for i := range o.pods {
		p := &o.pods[i]
		switch {
		case p.DeletionTimestamp != nil:
			if since := o.at.Sub(p.DeletionTimestamp.Time); since > b.terminating {
				out = append(out, newFinding(InvPods, fmt.Sprintf("terminating for %s", since.Round(time.Second)), podRef(p)))
			}
		case p.Status.Phase == v1.PodRunning:
		case p.Status.Phase == v1.PodFailed || p.Status.Phase == v1.PodSucceeded:
			out = append(out, newFinding(InvPods, fmt.Sprintf("%s: %s %s", p.Status.Phase, p.Status.Reason, p.Status.Message), podRef(p)))
		case p.Spec.NodeName != "":
			if since := o.at.Sub(scheduledAt(p)); since > b.containerCreating {
				out = append(out, newFinding(InvPods, fmt.Sprintf("scheduled to %s %s ago and not running (%s)", p.Spec.NodeName, since.Round(time.Second), waiting(p)), podRef(p)))
			}
		default:
			if since := o.at.Sub(p.CreationTimestamp.Time); since > b.unexplained && reasons[p.Namespace+"/"+p.Name] == "" {
				out = append(out, newFinding(InvPods, fmt.Sprintf("pending for %s with no reason the report can name", since.Round(time.Second)), podRef(p)))
			}
		}
	}
	return out, nil
}

// scheduledAt is when the pod was bound, or created if its status does
// not say.
func scheduledAt(p *v1.Pod) time.Time {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return p.CreationTimestamp.Time
}

// waiting says what a pod's containers wait for.
func waiting(p *v1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if w := s.State.Waiting; w != nil {
			return strings.TrimSpace(w.Reason + " " + w.Message)
		}
	}
	return "no container status"
}

// preparedOnce finds claims of running pods that are not prepared exactly
// once, on the pod's node, with their allocation's devices of the GPU
// driver.
func preparedOnce(o *observation) []finding {
	claims := map[string]*resourceapi.ResourceClaim{}
	for i := range o.claims {
		claims[o.claims[i].Namespace+"/"+o.claims[i].Name] = &o.claims[i]
	}
	var out []finding
	done := map[types.UID]bool{}
	for i := range o.pods {
		p := &o.pods[i]
		if p.Status.Phase != v1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		for _, name := range allocation.ClaimNames(p) {
			c := claims[p.Namespace+"/"+name]
			if c == nil || c.Status.Allocation == nil || done[c.UID] {
				continue
			}
			done[c.UID] = true
			want := allocatedDevices(c)
			if len(want) == 0 {
				continue // no device of the GPU driver
			}
			var on []string
			for node, cp := range o.checkpoints {
				if _, ok := cp.Claims[c.UID]; ok {
					on = append(on, node)
				}
			}
			sort.Strings(on)
			if len(on) != 1 || on[0] != p.Spec.NodeName {
				out = append(out, newFinding(InvPreparedOnce, fmt.Sprintf("its pod runs on %s; prepared on [%s]", p.Spec.NodeName, strings.Join(on, ", ")), claimRef(c), podRef(p)))
				continue
			}
			pc := o.checkpoints[on[0]].Claims[c.UID]
			got := preparedDevices(pc)
			if pc.Preparing || !slices.Equal(got, want) {
				out = append(out, newFinding(InvPreparedOnce, fmt.Sprintf("allocated %v; prepared %v (preparing: %t)", want, got, pc.Preparing), claimRef(c), podRef(p)))
			}
		}
	}
	return out
}

// allocatedDevices are a claim's devices of the GPU driver, with their
// share IDs, sorted.
func allocatedDevices(c *resourceapi.ResourceClaim) []string {
	var out []string
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver == gpu.DriverName {
			out = append(out, r.Pool+"/"+r.Device+"#"+string(ptr.Deref(r.ShareID, "")))
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// preparedDevices are the devices a checkpoint holds for a claim, in
// allocatedDevices' form.
func preparedDevices(pc *kit.PreparedClaim) []string {
	var out []string
	for _, d := range pc.Devices {
		out = append(out, d.Pool+"/"+d.Device+"#"+d.ShareID)
	}
	sort.Strings(out)
	return slices.Compact(out)
}
