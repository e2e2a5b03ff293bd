package allocation

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	resourcehelper "k8s.io/component-helpers/resource"
	schedulingcorev1 "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// The verdict: for a pod, whether its claims can be allocated on each node,
// decided by the allocator the scheduler and the cluster autoscaler run
// (k8s.io/dynamic-resource-allocation/structured: NewAllocator, then
// Allocate per node) over the snapshot's slices (DeviceTaintRules' taints
// applied), classes and allocated state. The explanations of why.go say
// why the allocator said no; they never decide it.

// Reason codes the verdict gives on its own, outside the device model.
const (
	// NodeTaint: the allocator places the pod's claims on a node whose
	// taint the pod does not tolerate, and on no other.
	NodeTaint = "NodeTaint"
	// NodeSelector: the allocator places the claims only on nodes the
	// pod's nodeSelector or required node affinity leaves out.
	NodeSelector = "NodeSelector"
	// NodeUnschedulable: only on cordoned nodes.
	NodeUnschedulable = "NodeUnschedulable"
	// NodeNotReady: only on nodes that are not Ready.
	NodeNotReady = "NodeNotReady"
	// AllocatorError: the allocator failed on every node the pod may use
	// (a selector's runtime error, an All request meeting a pool being
	// republished): the scheduler reports an error, not a place.
	AllocatorError = "AllocatorError"
	// Unexplained: the allocator places the claims on no node the pod may
	// use, and the device model finds no reason: the allocator's verdict
	// stands, with each node's answer.
	Unexplained = "Unexplained"
	// NotDRA: the allocator places the claims on a node the pod may use:
	// what holds the pod is outside DRA (CPU, memory, ports, a refusal
	// older than the devices it names).
	NotDRA = "NotDRA"
)

// DefaultFeatures are the allocator features Kubernetes 1.37 enables by
// default: its GA and beta DRA gates.
var DefaultFeatures = structured.Features{
	AdminAccess:            true,
	PrioritizedList:        true,
	DeviceTaints:           true,
	PartitionableDevices:   true,
	ConsumableCapacity:     true,
	DeviceBindingAndStatus: true,
}

// FeatureGates are the Kubernetes feature gates that switch the allocator's
// features, by name.
var FeatureGates = map[string]func(*structured.Features) *bool{
	"DRAAdminAccess":               func(f *structured.Features) *bool { return &f.AdminAccess },
	"DRAPrioritizedList":           func(f *structured.Features) *bool { return &f.PrioritizedList },
	"DRADeviceTaints":              func(f *structured.Features) *bool { return &f.DeviceTaints },
	"DRAPartitionableDevices":      func(f *structured.Features) *bool { return &f.PartitionableDevices },
	"DRAConsumableCapacity":        func(f *structured.Features) *bool { return &f.ConsumableCapacity },
	"DRADeviceBindingConditions":   func(f *structured.Features) *bool { return &f.DeviceBindingAndStatus },
	"DRAFractionalCapacityRange":   func(f *structured.Features) *bool { return &f.FractionalCapacityRange },
	"DRAListTypeAttributes":        func(f *structured.Features) *bool { return &f.ListTypeAttributes },
	"DRAOptionalNodeOperations":    func(f *structured.Features) *bool { return &f.OptionalNodeOperations },
	"DRADerivedAttributes":         func(f *structured.Features) *bool { return &f.DerivedAttributes },
	"DRADeviceCompatibilityGroups": func(f *structured.Features) *bool { return &f.CompatibilityGroups },
}

// WithGates returns f with the named gates set; an unknown name is an
// error naming the known ones.
func WithGates(f structured.Features, gates map[string]bool) (structured.Features, error) {
	for name, on := range gates {
		field, ok := FeatureGates[name]
		if !ok {
			known := make([]string, 0, len(FeatureGates))
			for k := range FeatureGates {
				known = append(known, k)
			}
			sort.Strings(known)
			return f, fmt.Errorf("feature gate %q does not switch the allocator; those that do: %s", name, strings.Join(known, ", "))
		}
		*field(&f) = on
	}
	return f, nil
}

// NodeVerdict is the allocator's answer for one node.
type NodeVerdict struct {
	Node string `json:"node"`
	// Fits: the allocator found devices for every claim the pod still
	// needs there.
	Fits bool `json:"fits"`
	// Err is the allocator's error on the node ("" when it answered).
	Err string `json:"error,omitempty"`
	// Outside are what keeps the pod off the node outside DRA, each as
	// its reason code and the object it names: a taint's key=value:effect,
	// "nodeSelector", "unschedulable", "NotReady".
	Outside []Blocker `json:"outside,omitempty"`
}

// Blocker is one thing that keeps a pod off a node.
type Blocker struct {
	Code string `json:"code"`
	What string `json:"what"`
}

// Verdict is the allocator's answer for a pod on every node.
type Verdict struct {
	// Err is the allocator's error for the pod as a whole (a selector's
	// runtime error): the scheduler gives up the pod, not one node.
	Err string `json:"error,omitempty"`
	// Claims are the claims the allocator was asked for (namespace/name;
	// "extended resources" for the claim the scheduler would make for
	// extended resources a DeviceClass serves).
	Claims []string      `json:"claims"`
	Nodes  []NodeVerdict `json:"nodes"`
}

// Fits are the nodes the allocator places the claims on.
func (v *Verdict) Fits() []string {
	var out []string
	for _, n := range v.Nodes {
		if n.Fits {
			out = append(out, n.Node)
		}
	}
	return out
}

// Usable are the nodes the allocator places the claims on and nothing
// outside DRA keeps the pod off.
func (v *Verdict) Usable() []string {
	var out []string
	for _, n := range v.Nodes {
		if n.Fits && len(n.Outside) == 0 {
			out = append(out, n.Node)
		}
	}
	return out
}

// classLister serves the snapshot's DeviceClasses to the allocator.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("deviceclass %q not found", name)
}

// verdictCelCache compiles selectors once for every verdict of the process.
var verdictCelCache = cel.NewCache(1024, cel.Features{EnableConsumableCapacity: true, EnableListTypeAttributes: true})

// allocatorOnce is the snapshot's allocator, made once.
type allocatorOnce struct {
	once     sync.Once
	features structured.Features
	alloc    structured.Allocator
	err      error
	// verdicts are the verdicts given, by pod (namespace/name): the
	// reason and the listing of a pod ask once.
	verdicts sync.Map
}

// allocInit guards the making of a snapshot's allocatorOnce.
var allocInit sync.Mutex

func (s *Snapshot) allocator(ctx context.Context) (structured.Allocator, structured.Features, error) {
	allocInit.Lock()
	if s.alloc == nil {
		s.alloc = &allocatorOnce{}
	}
	a := s.alloc
	allocInit.Unlock()
	a.once.Do(func() {
		a.features = DefaultFeatures
		if s.Features != nil {
			a.features = *s.Features
		}
		state := s.allocatedState(a.features, nil)
		a.alloc, a.err = structured.NewAllocator(ctx, a.features, state, classLister(s.Classes), s.patchedSlices(), verdictCelCache)
	})
	return a.alloc, a.features, a.err
}

// allocatedState is what the claims of the snapshot hold, as the scheduler
// gathers it: every allocated device but those given with admin access; a
// shared device's share and the capacity it consumes where consumable
// capacity is on. skip leaves claims out (namespace/name).
func (s *Snapshot) allocatedState(f structured.Features, skip sets.Set[string]) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for i := range s.AllClaims {
		c := &s.AllClaims[i]
		if c.Status.Allocation == nil || skip.Has(claimKey(c.Namespace, c.Name)) {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if ptr.Deref(r.AdminAccess, false) {
				continue
			}
			id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if f.ConsumableCapacity && r.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
				if r.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

// patchedSlices are the snapshot's slices with the taints of the
// DeviceTaintRules that select their devices added, as the scheduler's
// slice tracker gives them to the allocator. Slices no rule touches are
// not copied.
func (s *Snapshot) patchedSlices() []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(s.Slices))
	for i := range s.Slices {
		sl := &s.Slices[i]
		out[i] = sl
		for _, r := range s.TaintRules {
			sel := r.Spec.DeviceSelector
			if sel == nil || (sel.Driver != nil && *sel.Driver != sl.Spec.Driver) || (sel.Pool != nil && *sel.Pool != sl.Spec.Pool.Name) {
				continue
			}
			for j := range sl.Spec.Devices {
				if sel.Device != nil && *sel.Device != sl.Spec.Devices[j].Name {
					continue
				}
				if out[i] == sl {
					out[i] = sl.DeepCopy()
				}
				dev := &out[i].Spec.Devices[j]
				dev.Taints = append(dev.Taints, r.Spec.Taint)
			}
		}
	}
	return out
}

// Verdict asks the allocator, node by node, whether the pod's claims that
// are not yet allocated can be, and says for each node what outside DRA
// keeps the pod off it. It returns nil (no error) where the pod's claims
// are not all there yet (a template's claim not yet made).
func (s *Snapshot) Verdict(ctx context.Context, pod *v1.Pod) (*Verdict, error) {
	alloc, features, err := s.allocator(ctx)
	if err != nil {
		return nil, fmt.Errorf("the allocator: %w", err)
	}
	key := claimKey(pod.Namespace, pod.Name)
	if v, ok := s.alloc.verdicts.Load(key); ok {
		return v.(*Verdict), nil
	}
	v, err := s.verdict(ctx, alloc, features, pod)
	if err == nil && v != nil {
		s.alloc.verdicts.Store(key, v)
	}
	return v, err
}

func (s *Snapshot) verdict(ctx context.Context, alloc structured.Allocator, features structured.Features, pod *v1.Pod) (*Verdict, error) {
	var (
		claims []*resourceapi.ResourceClaim
		names  []string
		// bound are the allocated claims' node selectors: the pod can
		// only run where they select.
		bound []*v1.NodeSelector
	)
	for _, pc := range pod.Spec.ResourceClaims {
		name := claimName(pod, pc)
		claim := s.Claims[claimKey(pod.Namespace, name)]
		if name == "" || claim == nil {
			return nil, nil
		}
		if claim.Status.Allocation != nil {
			bound = append(bound, claim.Status.Allocation.NodeSelector)
			continue
		}
		claims = append(claims, claim)
		names = append(names, claimKey(claim.Namespace, claim.Name))
	}
	extended := s.extendedResources(pod)
	v := &Verdict{Claims: names}
	if len(extended) > 0 {
		v.Claims = append(v.Claims, "extended resources")
	}
	nodes := make([]*v1.Node, 0, len(s.Nodes))
	for _, n := range s.Nodes {
		nodes = append(nodes, n)
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	v.Nodes = make([]NodeVerdict, len(nodes))
	required := nodeaffinity.GetRequiredNodeAffinity(pod)
	logger := klog.FromContext(ctx)

	var (
		wg    sync.WaitGroup
		next  = make(chan int)
		fatal error
		mu    sync.Mutex
	)
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				node := nodes[i]
				nv := NodeVerdict{Node: node.Name, Outside: outside(logger, pod, node, required)}
				fits, err := allocates(ctx, alloc, features, node, claims, extended, bound, pod)
				switch {
				case errors.Is(err, structured.ErrFailedAllocationOnNode):
					nv.Err = strings.TrimSpace(err.Error())
				case err != nil:
					mu.Lock()
					fatal = err
					mu.Unlock()
					nv.Err = err.Error()
				default:
					nv.Fits = fits
				}
				v.Nodes[i] = nv
			}
		}()
	}
	for i := range nodes {
		next <- i
	}
	close(next)
	wg.Wait()
	if fatal != nil {
		v.Err = fatal.Error()
	}
	return v, nil
}

// allocates asks the allocator for one node: the pod's unallocated claims,
// and the claim the scheduler makes for extended resources that a
// DeviceClass serves and the node does not advertise itself (a device
// plugin's). Allocated claims must select the node.
func allocates(ctx context.Context, alloc structured.Allocator, features structured.Features, node *v1.Node,
	claims []*resourceapi.ResourceClaim, extended map[v1.ResourceName]extendedRequest, bound []*v1.NodeSelector, pod *v1.Pod) (bool, error) {
	for _, sel := range bound {
		if sel == nil {
			continue
		}
		ok, err := structured.NodeMatches(features, node, "", false, sel)
		if err != nil || !ok {
			return false, err
		}
	}
	if claim := extendedClaim(pod, node, extended); claim != nil {
		claims = append(slices.Clip(claims), claim)
	}
	if len(claims) == 0 {
		return true, nil
	}
	results, err := alloc.Allocate(klog.NewContext(ctx, klog.LoggerWithValues(klog.FromContext(ctx), "node", node.Name)), node, claims)
	if err != nil {
		return false, err
	}
	return len(results) == len(claims), nil
}

// extendedRequest is an extended resource of a pod that a DeviceClass
// serves: the class and how many devices.
type extendedRequest struct {
	class string
	count int64
}

// extendedResources are the pod's extended resources that a DeviceClass
// serves (by its extendedResourceName, or the implicit
// deviceclass.resource.kubernetes.io/<class>), with the pod's effective
// request (init, sidecar and regular containers, as the scheduler counts
// them). None where the pod already has its claim for them.
func (s *Snapshot) extendedResources(pod *v1.Pod) map[v1.ResourceName]extendedRequest {
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		return nil
	}
	reqs := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
	out := map[v1.ResourceName]extendedRequest{}
	names := make([]string, 0, len(s.Classes))
	for n := range s.Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	for name, q := range reqs {
		for _, cn := range names {
			class := s.Classes[cn]
			explicit := class.Spec.ExtendedResourceName != nil && *class.Spec.ExtendedResourceName == string(name)
			if explicit || string(name) == resourceapi.ResourceDeviceClassPrefix+class.Name {
				out[name] = extendedRequest{class: class.Name, count: q.Value()}
				break
			}
		}
	}
	return out
}

// extendedClaim is the claim the scheduler makes on node for the pod's
// extended resources that the node does not advertise: one request per
// resource, of its class, for its count.
func extendedClaim(pod *v1.Pod, node *v1.Node, extended map[v1.ResourceName]extendedRequest) *resourceapi.ResourceClaim {
	var reqs []resourceapi.DeviceRequest
	names := make([]string, 0, len(extended))
	for n := range extended {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for i, n := range names {
		if q, ok := node.Status.Allocatable[v1.ResourceName(n)]; ok && !q.IsZero() {
			continue // a device plugin's: the node's resources decide.
		}
		e := extended[v1.ResourceName(n)]
		reqs = append(reqs, resourceapi.DeviceRequest{
			Name: fmt.Sprintf("extended-%d", i),
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: e.class,
				AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
				Count:           e.count,
			},
		})
	}
	if len(reqs) == 0 {
		return nil
	}
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name + "-extended-resources", UID: pod.UID + "-extended"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}},
	}
}

// outside is what keeps the pod off the node outside DRA, as the
// scheduler's filters see it: the node cordoned, not Ready, a NoSchedule
// or NoExecute taint the pod does not tolerate, its nodeSelector or
// required node affinity. The taints the node controllers set for a
// cordoned or not Ready node say so in those codes.
func outside(logger klog.Logger, pod *v1.Pod, node *v1.Node, required nodeaffinity.RequiredNodeAffinity) []Blocker {
	var out []Blocker
	has := func(code string) bool {
		return slices.ContainsFunc(out, func(b Blocker) bool { return b.Code == code })
	}
	for _, t := range node.Spec.Taints {
		if t.Effect != v1.TaintEffectNoSchedule && t.Effect != v1.TaintEffectNoExecute {
			continue
		}
		if tolerates(logger, pod, t) {
			continue
		}
		switch t.Key {
		case v1.TaintNodeUnschedulable:
			out = append(out, Blocker{Code: NodeUnschedulable, What: "cordoned (" + taintString(t) + ")"})
		case v1.TaintNodeNotReady, v1.TaintNodeUnreachable:
			out = append(out, Blocker{Code: NodeNotReady, What: "not ready (" + taintString(t) + ")"})
		default:
			out = append(out, Blocker{Code: NodeTaint, What: "taint " + taintString(t) + " not tolerated"})
		}
	}
	if node.Spec.Unschedulable && !has(NodeUnschedulable) && !tolerates(logger, pod, v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}) {
		out = append(out, Blocker{Code: NodeUnschedulable, What: "cordoned"})
	}
	if !nodeReady(node) && !has(NodeNotReady) && !tolerates(logger, pod, v1.Taint{Key: v1.TaintNodeNotReady, Effect: v1.TaintEffectNoSchedule}) {
		out = append(out, Blocker{Code: NodeNotReady, What: "not ready"})
	}
	if ok, err := required.Match(node); err != nil || !ok {
		out = append(out, Blocker{Code: NodeSelector, What: "left out by the pod's nodeSelector or node affinity"})
	}
	return out
}

func tolerates(logger klog.Logger, pod *v1.Pod, t v1.Taint) bool {
	return schedulingcorev1.TolerationsTolerateTaint(logger, pod.Spec.Tolerations, &t, true)
}

func nodeReady(node *v1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue
		}
	}
	// A node without conditions (objects written by hand, a node not
	// yet heard from) is not held against the pod.
	return true
}

func taintString(t v1.Taint) string {
	kv := t.Key
	if t.Value != "" {
		kv += "=" + t.Value
	}
	return kv + ":" + string(t.Effect)
}

// podVerdict is the allocator's verdict for a pod that needs devices,
// nil where the snapshot has no nodes (read without them) or the pod
// needs none.
func (s *Snapshot) podVerdict(ctx context.Context, pod *v1.Pod) (*Verdict, error) {
	if len(s.Nodes) == 0 || (len(pod.Spec.ResourceClaims) == 0 && len(s.extendedResources(pod)) == 0) {
		return nil, nil
	}
	return s.Verdict(ctx, pod)
}

// outsideDRA is the reason when the allocator places the pod's claims on
// some node: none (false) when it places them on none. On a node the pod
// may use, DRA does not hold it: the scheduler's own word names what does
// (Insufficient cpu), else NotDRA. Only on nodes it may not use: the
// blocker found on most of them, naming each node's.
func (v *Verdict) outsideDRA(message string) (string, string, bool) {
	fits := v.Fits()
	if len(fits) == 0 {
		return "", "", false
	}
	if usable := v.Usable(); len(usable) > 0 {
		what := fmt.Sprintf("the allocator places its devices on %s, which the pod may use", listNodes(usable))
		if strings.Contains(message, "Insufficient") {
			return Insufficient, what + "; the scheduler: " + message, true
		}
		if message != "" {
			what += "; the scheduler's refusal is not DRA's or older than the devices it saw: " + message
		}
		return NotDRA, what, true
	}
	// The nodes the pod asks for (those its nodeSelector and affinity
	// leave in) say the reason where there are any: a taint, a cordon, a
	// node not Ready; of those, the nodes nearest to use (the fewest
	// blockers), the code most of them have, a cordon or a node not Ready
	// before a taint on a tie. Else the pod's own selection keeps it off
	// every node the claims fit.
	var wanted, unwanted []string
	fewest := -1
	for _, n := range v.Nodes {
		if !n.Fits {
			continue
		}
		if slices.ContainsFunc(n.Outside, func(b Blocker) bool { return b.Code == NodeSelector }) {
			unwanted = append(unwanted, n.Node)
			continue
		}
		if fewest < 0 || len(n.Outside) < fewest {
			fewest = len(n.Outside)
		}
	}
	count := map[string]int{}
	var parts []string
	for _, n := range v.Nodes {
		if !n.Fits || slices.Contains(unwanted, n.Node) {
			continue
		}
		var whats []string
		for _, b := range n.Outside {
			if len(n.Outside) == fewest {
				count[b.Code]++
			}
			whats = append(whats, b.What)
		}
		wanted = append(wanted, n.Node)
		parts = append(parts, n.Node+": "+strings.Join(whats, ", "))
	}
	code := NodeSelector
	if len(wanted) > 0 {
		code = ""
		for _, c := range []string{NodeUnschedulable, NodeNotReady, NodeTaint} {
			if count[c] > count[code] {
				code = c
			}
		}
	}
	if len(unwanted) > 0 {
		parts = append(parts, "left out by the pod's nodeSelector or node affinity: "+listNodes(unwanted))
	}
	return code, fmt.Sprintf("the allocator places its devices only on nodes the pod may not use: %s", strings.Join(limitList(parts, 8), "; ")), true
}

// agree reconciles the device model's explanation with the allocator's
// verdict that no node the pod may use fits: a model's reason for "no"
// stands; where the model finds none, the allocator's errors, the pools
// it cannot take from, or its bare answer per node are the reason.
func (s *Snapshot) agree(v *Verdict, code, msg string) (string, string, error) {
	switch {
	case v.Err != "":
		if code == SelectorError {
			return code, msg, nil
		}
		return AllocatorError, "the allocator fails for the pod: " + v.Err, nil
	case code != "" && code != Insufficient:
		return code, msg, nil
	}
	var errs []string
	for _, n := range v.Nodes {
		if n.Err != "" {
			errs = append(errs, n.Node+": "+n.Err)
		}
	}
	if len(errs) > 0 && len(errs) == len(v.Nodes) {
		return AllocatorError, "the allocator fails on every node: " + strings.Join(limitList(errs, 4), "; "), nil
	}
	if pools := s.IncompletePools(); len(pools) > 0 {
		var parts []string
		for _, p := range pools {
			parts = append(parts, p.String())
		}
		return PoolIncomplete, "the allocator places its claims on no node, and takes nothing from pools not wholly published: " + strings.Join(limitList(parts, 8), "; "), nil
	}
	answer := "the allocator places its claims on no node"
	if len(errs) > 0 {
		answer += " (" + strings.Join(limitList(errs, 4), "; ") + ")"
	}
	if msg != "" {
		answer += "; " + msg
	}
	return Unexplained, answer, nil
}

// PoolIncomplete: the devices the claim needs are in a pool the allocator
// takes nothing from, since not all of its slices of its newest
// generation are published (a driver republishing, or one that failed
// half-way).
const PoolIncomplete = "PoolIncomplete"

// Pool is a pool as the allocator gathers it: its newest generation's
// slices, and how many its slices say it has.
type Pool struct {
	Driver, Name string
	Generation   int64
	Published    int
	SliceCount   int64
}

func (p Pool) String() string {
	return fmt.Sprintf("%s/%s generation %d: %d of %d slices published", p.Driver, p.Name, p.Generation, p.Published, p.SliceCount)
}

// Pools gathers the snapshot's pools: per driver and pool name, the slices
// of the newest generation, older ones left out as the allocator leaves
// them.
func (s *Snapshot) Pools() []Pool {
	type key struct{ driver, name string }
	pools := map[key]*Pool{}
	for i := range s.Slices {
		sl := &s.Slices[i]
		k := key{sl.Spec.Driver, sl.Spec.Pool.Name}
		p := pools[k]
		switch {
		case p == nil || sl.Spec.Pool.Generation > p.Generation:
			pools[k] = &Pool{Driver: k.driver, Name: k.name, Generation: sl.Spec.Pool.Generation, Published: 1, SliceCount: sl.Spec.Pool.ResourceSliceCount}
		case sl.Spec.Pool.Generation == p.Generation:
			p.Published++
		}
	}
	out := make([]Pool, 0, len(pools))
	for _, p := range pools {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Driver != out[j].Driver {
			return out[i].Driver < out[j].Driver
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// currentSlices are the slices the allocator reads devices from: those
// of each pool's newest generation, where all of that generation's slices
// are published.
func (s *Snapshot) currentSlices() []*resourceapi.ResourceSlice {
	type key struct{ driver, name string }
	complete := map[key]int64{}
	for _, p := range s.Pools() {
		if int64(p.Published) == p.SliceCount {
			complete[key{p.Driver, p.Name}] = p.Generation
		}
	}
	out := make([]*resourceapi.ResourceSlice, 0, len(s.Slices))
	for i := range s.Slices {
		sl := &s.Slices[i]
		if g, ok := complete[key{sl.Spec.Driver, sl.Spec.Pool.Name}]; ok && g == sl.Spec.Pool.Generation {
			out = append(out, sl)
		}
	}
	return out
}

// IncompletePools are the pools whose newest generation has another
// number of slices published than its slices say (fewer while a driver
// publishes; the allocator takes nothing from such a pool).
func (s *Snapshot) IncompletePools() []Pool {
	var out []Pool
	for _, p := range s.Pools() {
		if int64(p.Published) != p.SliceCount {
			out = append(out, p)
		}
	}
	return out
}

func listNodes(nodes []string) string {
	return strings.Join(limitList(nodes, 8), ", ")
}

// limitList keeps the first n items and says how many more there are.
func limitList(items []string, n int) []string {
	if len(items) <= n {
		return items
	}
	return append(slices.Clip(items[:n]), fmt.Sprintf("and %d more", len(items)-n))
}

// ReadFeatures reads the allocator features a cluster enables from its API
// server's feature gates (the kubernetes_feature_enabled metric of
// /metrics, which the scheduler's gates follow unless set apart), over
// DefaultFeatures. It returns DefaultFeatures and the reason where the
// metrics cannot be read (a user without get on /metrics).
func ReadFeatures(ctx context.Context, client kubernetes.Interface) (structured.Features, error) {
	rc := client.CoreV1().RESTClient()
	if !speaksToAServer(rc) {
		return DefaultFeatures, errors.New("the client reaches no API server's /metrics")
	}
	raw, err := rc.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return DefaultFeatures, fmt.Errorf("reading the API server's feature gates from /metrics: %w", err)
	}
	gates := featureGatesFromMetrics(raw)
	if len(gates) == 0 {
		return DefaultFeatures, errors.New("the API server's /metrics has no kubernetes_feature_enabled")
	}
	f := DefaultFeatures
	for name, on := range gates {
		if field, ok := FeatureGates[name]; ok {
			*field(&f) = on
		}
	}
	// Binding conditions need the device status too, as the scheduler
	// switches them.
	if on, ok := gates["DRAResourceClaimDeviceStatus"]; ok && !on {
		f.DeviceBindingAndStatus = false
	}
	return f, nil
}

// featureGatesFromMetrics reads the kubernetes_feature_enabled samples of
// a Prometheus text exposition: gate name → enabled.
func featureGatesFromMetrics(raw []byte) map[string]bool {
	const metric = "kubernetes_feature_enabled{"
	gates := map[string]bool{}
	for line := range strings.Lines(string(raw)) {
		rest, ok := strings.CutPrefix(line, metric)
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		for l := range strings.SplitSeq(labels, ",") {
			if name, ok := strings.CutPrefix(l, `name="`); ok {
				gates[strings.TrimSuffix(name, `"`)] = strings.TrimSpace(value) == "1"
			}
		}
	}
	return gates
}
