// Package allocation reads a cluster's Dynamic Resource Allocation state
// as the allocator does and explains it: for each pod, which claim request
// got which device (and, for a prioritized list, which subrequest was
// chosen), the device's node and, in a Vocabulary's words, its tier; what
// holds every device; and for a pod that waits, why, in the allocator's
// own terms (taints, constraints, counters, capacity, selectors, node
// resources, gangs, topology). It reads any cluster of resource.k8s.io/v1;
// dralab's lab, scenarios, dashboard and soak read theirs through it.
package allocation

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"

	"golang.org/x/sync/errgroup"
	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	resourcev1beta2 "k8s.io/api/resource/v1beta2"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// Row is one allocated device of one pod's claim, or one pod without an
// allocation.
type Row struct {
	Namespace string
	Pod       string
	Phase     v1.PodPhase
	Node      string
	Claim     string
	// Request is the claim's request; Subrequest the prioritized-list
	// alternative chosen for it, if any.
	Request    string
	Subrequest string
	Driver     string
	Pool       string
	Device     string
	// Product is the device's productName attribute; Tier its tier, as
	// the snapshot's Vocabulary names it.
	Product     string
	Tier        string
	AdminAccess bool
	// Profile is the profile of a partition (a MIG device's, 1g.10gb),
	// from the Vocabulary's ProfileAttribute.
	Profile string
	// DeviceType is the device's type as the Vocabulary names it (dralab's
	// GPUs: gpu, mig or time-slice); TimeSlice: it is a time slice.
	DeviceType string
	TimeSlice  bool
	// ShareID and Consumed describe one share of a device that several
	// claims share: the allocation's share ID and the memory it consumes.
	ShareID  string
	Consumed string
	// Attributes are the device's string, version, int and bool
	// attributes, by the names the slice publishes.
	Attributes map[string]string
	// Aligned are the claim's matchAttribute constraints that tie the
	// device to others of the claim: the attribute, the device's value and
	// the devices it is aligned with ("resource.kubernetes.io/pcieRoot
	// pci0000:15, with nic-0"): the pair a claim for a GPU and a NIC got.
	Aligned []string
	// SkipNodeOperations are the node operations the allocation skips
	// for the device (a copy of its slice's skipNodeOperations).
	SkipNodeOperations []string
	// Tainted: a taint with an effect applies to the device.
	Tainted bool
	// Taints are the device's taints with an effect, from its slice and
	// from DeviceTaintRules, as key=value:effect.
	Taints []string
	// Health is the device's health as the kubelet reports it in the pod's
	// status (Healthy, Unhealthy, Unknown), HealthMessage the driver's
	// word on it; "" before any report.
	Health        string
	HealthMessage string
	// Status is the claim's status.devices entry of the device: its True
	// conditions (Ready, an attach condition) and its data.
	Conditions []string
	Data       map[string]string
	// NodeTier is the tier of the devices the node counts, as the
	// Vocabulary names it: what a counted GPU is, since counting names no
	// device.
	NodeTier string
	// ExtendedResourceClaim: the claim backs the pod's extended resources.
	ExtendedResourceClaim bool
	// Unschedulable: the scheduler tried the pod and found no place.
	Unschedulable bool
	// Metadata are the devices the pod's containers found in their device
	// metadata files (ParseMetadata), where read; nil otherwise.
	Metadata []MetadataDevice
	// NodeAllocatable is what the scheduler accounted for the pod's node
	// resources through its devices (DRAResources): a GPU's host memory.
	NodeAllocatable v1.ResourceList
	// ReasonCode and Reason say why a pod waits, when it does.
	ReasonCode string
	Reason     string
}

// DeviceRef names a device.
func (r Row) DeviceRef() string {
	if r.Device == "" {
		return ""
	}
	return r.Driver + "/" + r.Pool + "/" + r.Device
}

// Snapshot is what the report reads from the API: a namespace's pods and
// claims, and the cluster-wide objects that explain their allocations.
type Snapshot struct {
	// Vocabulary names the devices in the reader's words.
	Vocabulary Vocabulary
	Pods       []v1.Pod
	// Claims are the namespace's (all namespaces' when read for all), by
	// claimKey; AllClaims the cluster's.
	Claims     map[string]*resourceapi.ResourceClaim
	AllClaims  []resourceapi.ResourceClaim
	Slices     []resourceapi.ResourceSlice
	Classes    map[string]*resourceapi.DeviceClass
	TaintRules []resourceapi.DeviceTaintRule
	Nodes      map[string]*v1.Node
	// Bound are every namespace's pods bound to a node: what the node's
	// resources are held by. A snapshot Read for one namespace has none
	// at first: it lists the pods of a node where it needs them (boundOn).
	Bound []v1.Pod
	// boundOn lists the pods bound to a node (every node's: ""), every
	// namespace's; nil where Bound has them all.
	boundOn func(ctx context.Context, node string) ([]v1.Pod, error)
	// PodGroups are the namespace's, by namespace/name; none where the
	// API server does not serve them.
	PodGroups map[string]*schedulingv1beta1.PodGroup
	// NotServed are the resources Read found the cluster does not serve
	// (resource.group), read as none.
	NotServed []string

	// Features are the allocator features the cluster enables; nil:
	// DefaultFeatures. FeaturesFrom says where Read found them.
	Features     *structured.Features
	FeaturesFrom string

	// matchCache keeps the devices each alternative matches, found once
	// a snapshot of NewSnapshot (whose objects do not change).
	matchCache *matchCache
	// alloc is the allocator over the snapshot, made at its first use;
	// idx its index.
	alloc *allocatorOnce
	idx   *index
}

// claimKey keys Snapshot.Claims: namespace/name.
func claimKey(namespace, name string) string { return namespace + "/" + name }

// Read lists a namespace's pods and claims (metav1.NamespaceAll: every
// namespace's) and the cluster's slices, classes, taint rules, claims and
// nodes, a page at a time (PageSize objects) where the server pages.
// v names the devices in the reader's words. A resource the cluster does
// not serve (DeviceTaintRules, PodGroups) is read as none and named in
// the snapshot's NotServed.
func Read(ctx context.Context, client kubernetes.Interface, namespace string, v Vocabulary) (*Snapshot, error) {
	r := client.ResourceV1()
	var (
		pods      []v1.Pod
		claims    []resourceapi.ResourceClaim
		slices    []resourceapi.ResourceSlice
		classes   []resourceapi.DeviceClass
		rules     []resourceapi.DeviceTaintRule
		nodes     []v1.Node
		notServed []string
	)
	// The lists at once: each decodes as its pages come, the slices (the
	// most) beside the rest.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		pods, err = readPods(gctx, client, namespace, "")
		return err
	})
	g.Go(func() (err error) {
		claimItems := func(l *resourceapi.ResourceClaimList) ([]resourceapi.ResourceClaim, metav1.ListMeta) {
			return l.Items, l.ListMeta
		}
		claims, err = listPages(gctx, "resourceclaims", metav1.ListOptions{}, rawSource(r.RESTClient(), "resourceclaims", ""),
			func(ctx context.Context, o metav1.ListOptions) ([]resourceapi.ResourceClaim, string, error) {
				l, err := r.ResourceClaims(metav1.NamespaceAll).List(ctx, o)
				return itemsOf(l, err, claimItems)
			},
			pageDecoder[resourceapi.ResourceClaim](resourceapi.SchemeGroupVersion, "ResourceClaimList", claimItems))
		return err
	})
	g.Go(func() (err error) {
		var (
			countersMu sync.Mutex
			counters   = counterMaps{}
		)
		sliceItems := func(l *resourceapi.ResourceSliceList) ([]resourceapi.ResourceSlice, metav1.ListMeta) {
			countersMu.Lock()
			defer countersMu.Unlock()
			counters.shareCounters(l.Items)
			return l.Items, l.ListMeta
		}
		slices, err = listPages(gctx, "resourceslices", metav1.ListOptions{}, rawSource(r.RESTClient(), "resourceslices", ""),
			func(ctx context.Context, o metav1.ListOptions) ([]resourceapi.ResourceSlice, string, error) {
				l, err := r.ResourceSlices().List(ctx, o)
				return itemsOf(l, err, sliceItems)
			},
			pageDecoder[resourceapi.ResourceSlice](resourceapi.SchemeGroupVersion, "ResourceSliceList", sliceItems))
		return err
	})
	g.Go(func() (err error) {
		classes, err = listAll(gctx, "deviceclasses", metav1.ListOptions{}, func(ctx context.Context, o metav1.ListOptions) ([]resourceapi.DeviceClass, string, error) {
			l, err := r.DeviceClasses().List(ctx, o)
			return itemsOf(l, err, func(l *resourceapi.DeviceClassList) ([]resourceapi.DeviceClass, metav1.ListMeta) {
				return l.Items, l.ListMeta
			})
		})
		if err != nil {
			return err
		}
		rules, err = listAll(gctx, "devicetaintrules", metav1.ListOptions{}, func(ctx context.Context, o metav1.ListOptions) ([]resourceapi.DeviceTaintRule, string, error) {
			l, err := r.DeviceTaintRules().List(ctx, o)
			return itemsOf(l, err, func(l *resourceapi.DeviceTaintRuleList) ([]resourceapi.DeviceTaintRule, metav1.ListMeta) {
				return l.Items, l.ListMeta
			})
		})
		if apierrors.IsNotFound(err) {
			// Before 1.37, DeviceTaintRules were served at v1beta2 only.
			rules, err = readOlderTaintRules(gctx, client)
			if apierrors.IsNotFound(err) {
				notServed = append(notServed, "devicetaintrules.resource.k8s.io")
				return nil
			}
		}
		return err
	})
	g.Go(func() (err error) {
		nodeItems := func(l *v1.NodeList) ([]v1.Node, metav1.ListMeta) {
			for i := range l.Items {
				// A node's images (dozens of names each) are nothing an
				// allocation reads.
				l.Items[i].Status.Images = nil
			}
			return l.Items, l.ListMeta
		}
		nodes, err = listPages(gctx, "nodes", metav1.ListOptions{}, rawSource(client.CoreV1().RESTClient(), "nodes", ""),
			func(ctx context.Context, o metav1.ListOptions) ([]v1.Node, string, error) {
				l, err := client.CoreV1().Nodes().List(ctx, o)
				return itemsOf(l, err, nodeItems)
			},
			pageDecoder[v1.Node](v1.SchemeGroupVersion, "NodeList", nodeItems))
		return err
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	snap := NewSnapshot(v, namespace, pods, claims, slices, classes, rules, nodes)
	snap.NotServed = notServed
	features, err := ReadFeatures(ctx, client)
	snap.Features = &features
	if err != nil {
		snap.FeaturesFrom = "Kubernetes 1.37's defaults (" + err.Error() + ")"
	} else {
		snap.FeaturesFrom = "the API server's feature gates"
	}
	if namespace != metav1.NamespaceAll {
		// The other namespaces' pods hold a node's CPUs and memory: read
		// where a node's are in question, not the cluster's every pod.
		snap.boundOn = boundReader(client)
	}
	if err := snap.ReadPodGroups(ctx, client, namespace); err != nil {
		return nil, err
	}
	return snap, nil
}

// boundReader lists the pods bound to a node (every node's: ""), every
// namespace's.
func boundReader(client kubernetes.Interface) func(ctx context.Context, node string) ([]v1.Pod, error) {
	return func(ctx context.Context, node string) ([]v1.Pod, error) {
		selector := "spec.nodeName!="
		if node != "" {
			selector = "spec.nodeName=" + node
		}
		bound, err := readPods(ctx, client, metav1.NamespaceAll, selector)
		if err != nil {
			return nil, fmt.Errorf("the pods bound to nodes: %w", err)
		}
		// The selector said it; a server (or a fake) that ignores it must
		// not make a pod count.
		return slices.DeleteFunc(bound, func(p v1.Pod) bool { return p.Spec.NodeName == "" || node != "" && p.Spec.NodeName != node }), nil
	}
}

// readPods lists a namespace's pods (metav1.NamespaceAll: every
// namespace's), those a field selector selects where it names one.
func readPods(ctx context.Context, client kubernetes.Interface, namespace, selector string) ([]v1.Pod, error) {
	podItems := func(l *v1.PodList) ([]v1.Pod, metav1.ListMeta) { return l.Items, l.ListMeta }
	return listPages(ctx, "pods", metav1.ListOptions{FieldSelector: selector}, rawSource(client.CoreV1().RESTClient(), "pods", namespace),
		func(ctx context.Context, o metav1.ListOptions) ([]v1.Pod, string, error) {
			l, err := client.CoreV1().Pods(namespace).List(ctx, o)
			return itemsOf(l, err, podItems)
		},
		pageDecoder[v1.Pod](v1.SchemeGroupVersion, "PodList", podItems))
}

// PageSize is how many objects Read asks for at a time.
var PageSize int64 = 500

// listAll lists every object of a resource, a page at a time: the next
// page from the continue token the last one gave, until none. A token
// that expired (the server compacted past it) starts the list again
// without pages, as client-go's pager does.
func listAll[T any](ctx context.Context, resource string, opts metav1.ListOptions, list func(context.Context, metav1.ListOptions) ([]T, string, error)) ([]T, error) {
	var out []T
	opts.Limit = PageSize
	for {
		items, next, err := list(ctx, opts)
		if apierrors.IsResourceExpired(err) && opts.Continue != "" {
			opts.Continue, opts.Limit, out = "", 0, nil
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", resource, err)
		}
		// Nothing here reads managed fields, a large part of a pod: each
		// page's are let go as it is read.
		for i := range items {
			if o, ok := any(&items[i]).(metav1.Object); ok {
				o.SetManagedFields(nil)
			}
		}
		out = append(out, items...)
		if next == "" {
			return out, nil
		}
		opts.Continue = next
	}
}

// itemsOf is a list's items and continue token, or its error.
func itemsOf[L any, T any](l *L, err error, items func(*L) ([]T, metav1.ListMeta)) ([]T, string, error) {
	if err != nil {
		return nil, "", err
	}
	got, meta := items(l)
	return got, meta.Continue, nil
}

// ReadPodGroups lists the PodGroups of the snapshot's namespace (all
// namespaces': metav1.NamespaceAll), only where some pod joins one: the
// Workload API is off by default, and a cluster that does not serve it has
// none.
func (s *Snapshot) ReadPodGroups(ctx context.Context, client kubernetes.Interface, namespace string) error {
	if !slices.ContainsFunc(s.Pods, func(p v1.Pod) bool { return GroupOf(&p) != "" }) {
		return nil
	}
	groups, err := client.SchedulingV1beta1().PodGroups(namespace).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		s.NotServed = append(s.NotServed, "podgroups.scheduling.k8s.io")
		return nil
	}
	if err != nil {
		return fmt.Errorf("listing podgroups: %w", err)
	}
	s.SetPodGroups(groups.Items)
	return nil
}

// SetPodGroups records the PodGroups of the snapshot's pods.
func (s *Snapshot) SetPodGroups(groups []schedulingv1beta1.PodGroup) {
	s.PodGroups = map[string]*schedulingv1beta1.PodGroup{}
	for i := range groups {
		s.PodGroups[claimKey(groups[i].Namespace, groups[i].Name)] = &groups[i]
	}
}

// NewSnapshot makes a snapshot of listed objects (from the API or from
// informers' caches): a namespace's pods (metav1.NamespaceAll: every
// namespace's) and the cluster's claims, slices, classes, taint rules and
// nodes, whose devices v names. The pods are sorted in creation order; the
// slices are kept.
func NewSnapshot(v Vocabulary, namespace string, pods []v1.Pod, claims []resourceapi.ResourceClaim, slices []resourceapi.ResourceSlice,
	classes []resourceapi.DeviceClass, rules []resourceapi.DeviceTaintRule, nodes []v1.Node) *Snapshot {
	s := &Snapshot{Vocabulary: v, Pods: pods, Claims: make(map[string]*resourceapi.ResourceClaim, len(claims)), AllClaims: claims,
		Slices: slices, Classes: make(map[string]*resourceapi.DeviceClass, len(classes)), TaintRules: rules, Nodes: make(map[string]*v1.Node, len(nodes)),
		matchCache: &matchCache{found: map[string]matched{}}}
	for i := range claims {
		if namespace == metav1.NamespaceAll || claims[i].Namespace == namespace {
			s.Claims[claimKey(claims[i].Namespace, claims[i].Name)] = &claims[i]
		}
	}
	for i := range classes {
		s.Classes[classes[i].Name] = &classes[i]
	}
	for i := range nodes {
		s.Nodes[nodes[i].Name] = &nodes[i]
	}
	if namespace == metav1.NamespaceAll {
		bound := 0
		for i := range pods {
			if pods[i].Spec.NodeName != "" {
				bound++
			}
		}
		s.Bound = make([]v1.Pod, 0, bound)
		for i := range pods {
			if pods[i].Spec.NodeName != "" {
				s.Bound = append(s.Bound, pods[i])
			}
		}
	}
	// The order sorted by index, the pods then moved once: a pod is a
	// large value, and a cluster's pods are many.
	order := make([]int, len(pods))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(i, j int) bool {
		a, b := &pods[order[i]], &pods[order[j]]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		// Timestamps have seconds: pods created in one second are in the
		// order their names say, a template's by their numbers.
		return lessName(a.Name, b.Name)
	})
	for i, k := range order {
		if i != k {
			s.Pods = make([]v1.Pod, len(pods))
			for i, k := range order {
				s.Pods[i] = pods[k]
			}
			break
		}
	}
	return s
}

// Allocations reads a namespace and returns its allocation table.
func Allocations(ctx context.Context, client kubernetes.Interface, namespace string, v Vocabulary) ([]Row, error) {
	s, err := Read(ctx, client, namespace, v)
	if err != nil {
		return nil, err
	}
	return s.Rows(ctx)
}

// Rows builds the allocation table, pods in creation order.
func (s *Snapshot) Rows(ctx context.Context) ([]Row, error) {
	var rows []Row
	for i := range s.Pods {
		r, err := s.PodRows(ctx, &s.Pods[i])
		if err != nil {
			return nil, err
		}
		rows = append(rows, r...)
	}
	return rows, nil
}

// PodRows are one pod's rows of the allocation table: one per allocated
// device, else one saying why it waits, read against the whole snapshot
// (the pod's group among its pods).
func (s *Snapshot) PodRows(ctx context.Context, pod *v1.Pod) ([]Row, error) {
	var rows []Row
	{
		base := Row{Namespace: pod.Namespace, Pod: pod.Name, Phase: pod.Status.Phase, Node: pod.Spec.NodeName, Unschedulable: Unschedulable(pod), NodeAllocatable: DRAResources(pod)}
		if node := s.Nodes[pod.Spec.NodeName]; node != nil {
			base.NodeTier = s.Vocabulary.nodeTier(node)
		}
		claimRows := 0
		for _, ref := range podClaims(pod) {
			claim := s.Claims[claimKey(pod.Namespace, ref.name)]
			if claim == nil || claim.Status.Allocation == nil {
				continue
			}
			for _, r := range claim.Status.Allocation.Devices.Results {
				row := base
				row.Claim = claim.Name
				row.ExtendedResourceClaim = ref.extended
				row.Request, row.Subrequest, _ = strings.Cut(r.Request, "/")
				row.Driver, row.Pool, row.Device = r.Driver, r.Pool, r.Device
				row.AdminAccess = r.AdminAccess != nil && *r.AdminAccess
				if r.ShareID != nil {
					row.ShareID = string(*r.ShareID)
				}
				row.Consumed = consumed(r.ConsumedCapacity)
				row.Health, row.HealthMessage = podHealth(pod, ref.podName, row.Request, r.Device)
				row.Conditions, row.Data = deviceStatus(claim, r)
				row.Aligned = s.Aligned(ctx, claim, r)
				for _, op := range r.SkipNodeOperations {
					row.SkipNodeOperations = append(row.SkipNodeOperations, string(op))
				}
				if dev := s.device(r.Driver, r.Pool, r.Device); dev != nil {
					row.Product = stringAttr(dev, "productName")
					if s.Vocabulary.ProfileAttribute != "" {
						row.Profile = stringAttr(dev, s.Vocabulary.ProfileAttribute)
					}
					row.DeviceType = s.Vocabulary.deviceType(r.Driver, dev)
					row.TimeSlice = row.DeviceType != "" && row.DeviceType == s.Vocabulary.TimeSliceType
					row.Attributes = stringAttrs(dev)
					row.Taints = s.Taints(r.Driver, r.Pool, dev)
					row.Tainted = len(row.Taints) > 0
					tier, err := s.Vocabulary.tier(ctx, r.Driver, dev)
					if err != nil {
						return nil, err
					}
					row.Tier = tier
				}
				rows = append(rows, row)
				claimRows++
			}
		}
		if claimRows == 0 {
			if pod.Spec.NodeName == "" && pod.DeletionTimestamp == nil {
				code, reason, err := s.why(ctx, pod)
				if err != nil {
					return nil, err
				}
				base.ReasonCode, base.Reason = code, reason
			}
			rows = append(rows, base)
		}
	}
	return rows, nil
}

type claimRef struct {
	name     string
	extended bool
	// podName is the claim's name in the pod's spec ("" for the extended
	// resources' claim), which the kubelet's health status names.
	podName string
}

// podClaims lists the claims a pod uses: its own, and the one backing its
// extended resources.
func podClaims(pod *v1.Pod) []claimRef {
	var refs []claimRef
	for _, pc := range pod.Spec.ResourceClaims {
		if n := claimName(pod, pc); n != "" {
			refs = append(refs, claimRef{name: n, podName: pc.Name})
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		refs = append(refs, claimRef{name: st.ResourceClaimName, extended: true})
	}
	return refs
}

// ClaimNames are the names of the ResourceClaims a pod uses: its own, its
// templates' generated ones once the controller named them, and the claim
// of its extended resources.
func ClaimNames(pod *v1.Pod) []string {
	var out []string
	for _, r := range podClaims(pod) {
		out = append(out, r.name)
	}
	return out
}

func claimName(pod *v1.Pod, pc v1.PodResourceClaim) string {
	if pc.ResourceClaimName != nil {
		return *pc.ResourceClaimName
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == pc.Name && st.ResourceClaimName != nil {
			return *st.ResourceClaimName
		}
	}
	return ""
}

func (s *Snapshot) device(driver, pool, name string) *resourceapi.Device {
	return s.index().devices[deviceKey{driver, pool, name}]
}

// consumed is what a share consumes of its device: its memory (a GPU's
// capacity "memory"), else the one capacity it consumes (a NIC's
// bandwidth), else "".
func consumed(c map[resourceapi.QualifiedName]resource.Quantity) string {
	if q, ok := c["memory"]; ok {
		return q.String()
	}
	if len(c) == 1 {
		for _, q := range c {
			return q.String()
		}
	}
	return ""
}

func stringAttrs(dev *resourceapi.Device) map[string]string {
	m := map[string]string{}
	for name, a := range dev.Attributes {
		switch {
		case a.StringValue != nil:
			m[string(name)] = *a.StringValue
		case a.VersionValue != nil:
			m[string(name)] = *a.VersionValue
		case a.IntValue != nil:
			m[string(name)] = strconv.FormatInt(*a.IntValue, 10)
		case a.BoolValue != nil:
			m[string(name)] = strconv.FormatBool(*a.BoolValue)
		}
	}
	return m
}

// Attribute is a device's attribute by its fully qualified name: one of
// the driver's own domain is published unqualified.
func (r Row) Attribute(name string) (string, bool) {
	if v, ok := r.Attributes[name]; ok {
		return v, true
	}
	if id, own := strings.CutPrefix(name, r.Driver+"/"); own {
		v, ok := r.Attributes[id]
		return v, ok
	}
	return "", false
}

func stringAttr(dev *resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := dev.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// DeviceTaints are the taints with an effect that apply to a device, as
// key=value:effect.
func (s *Snapshot) DeviceTaints(driver, pool, device string) []string {
	dev := s.device(driver, pool, device)
	if dev == nil {
		return nil
	}
	return s.Taints(driver, pool, dev)
}

// Taints are the taints with an effect that apply to a published device,
// from the slice or from a DeviceTaintRule (devices.State.Taints), as
// key=value:effect.
func (s *Snapshot) Taints(driver, pool string, dev *resourceapi.Device) []string {
	return taintStrings(s.state().Taints(devices.Device{Driver: driver, Pool: pool, Device: *dev}))
}

func taintStrings(taints []resourceapi.DeviceTaint) []string {
	var out []string
	for _, t := range taints {
		kv := t.Key
		if t.Value != "" {
			kv += "=" + t.Value
		}
		out = append(out, kv+":"+string(t.Effect))
	}
	return out
}

// podHealth is a device's health as the kubelet reports it in the pod's
// container statuses: the entries of the claim (claim:<name>) or of its
// request (claim:<name>/<request>), and of those the device's, when there
// are several (the kubelet names a resource by its CDI device, which holds
// the device's name).
func podHealth(pod *v1.Pod, podClaim, request, device string) (string, string) {
	if podClaim == "" {
		return "", ""
	}
	var found []v1.ResourceHealth
	for _, cs := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
		for _, rs := range cs.AllocatedResourcesStatus {
			if name := string(rs.Name); name == "claim:"+podClaim || name == "claim:"+podClaim+"/"+request {
				found = append(found, rs.Resources...)
			}
		}
	}
	if len(found) > 1 {
		found = slices.DeleteFunc(found, func(h v1.ResourceHealth) bool { return !strings.Contains(string(h.ResourceID), device) })
	}
	if len(found) == 0 {
		return "", ""
	}
	return string(found[0].Health), ptr.Deref(found[0].Message, "")
}

// deviceStatus is the claim's status.devices entry of an allocated device:
// its True conditions and its data, if a JSON object of strings.
func deviceStatus(claim *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) ([]string, map[string]string) {
	for _, ds := range claim.Status.Devices {
		if ds.Driver != r.Driver || ds.Pool != r.Pool || ds.Device != r.Device || ptr.Deref(ds.ShareID, "") != string(ptr.Deref(r.ShareID, "")) {
			continue
		}
		var conds []string
		for _, c := range ds.Conditions {
			if c.Status == metav1.ConditionTrue {
				conds = append(conds, c.Type)
			}
		}
		var data map[string]string
		if ds.Data != nil {
			_ = json.Unmarshal(ds.Data.Raw, &data)
		}
		return conds, data
	}
	return nil, nil
}

// Unschedulable reports whether the scheduler tried the pod and found no
// node for it.
func Unschedulable(pod *v1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse && c.Reason == v1.PodReasonUnschedulable {
			return true
		}
	}
	return false
}

// schedulingMessage is the scheduler's own word on an unscheduled pod.
func schedulingMessage(pod *v1.Pod) string {
	for _, c := range pod.Status.Conditions {
		if c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

// Table renders rows as an aligned table.
func Table(rows []Row) string {
	var b strings.Builder
	_ = WriteTable(&b, rows) // a strings.Builder does not fail
	return b.String()
}

// WriteTable prints rows as an aligned table.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header, body := Cells(rows)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, cells := range body {
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// Cells is the allocation table as text cells, a header and a line per
// row, as WriteTable prints it and the HTML reports show it. The
// PARTITION column appears only where a device is split or shared, and
// ALIGNED only where a claim's constraint ties its devices together (a
// GPU and a NIC under one PCIe root), so that the tables of whole GPUs
// stay as they were.
func Cells(rows []Row) (header []string, body [][]string) {
	partitions := slices.ContainsFunc(rows, func(r Row) bool { return r.partition() != "" })
	aligned := slices.ContainsFunc(rows, func(r Row) bool { return len(r.Aligned) > 0 })
	header = []string{"POD", "CLAIM", "REQUEST → CHOSEN", "DEVICE", "TIER", "NODE", "STATUS"}
	if partitions {
		header = slices.Insert(header, 4, "PARTITION")
	}
	if aligned {
		header = slices.Insert(header, len(header)-2, "ALIGNED")
	}
	for _, r := range rows {
		req := r.Request
		if r.Subrequest != "" {
			req += " → " + r.Subrequest
		}
		status := string(r.Phase)
		if r.Reason != "" {
			status += ": " + r.Reason
		}
		if r.AdminAccess {
			status += " (admin access)"
		}
		if r.Health == string(v1.ResourceHealthStatusUnhealthy) || r.Health == string(v1.ResourceHealthStatusUnknown) {
			status += " (device " + r.Health
			if r.HealthMessage != "" {
				status += ": " + r.HealthMessage
			}
			status += ")"
		}
		if r.Tainted {
			status += " (device tainted " + strings.Join(r.Taints, ", ") + ")"
		}
		// A counted GPU names no device: the node's tier says what it is.
		// A device of no tier (another driver's NIC) has none.
		tier := r.Tier
		if tier == "" && r.NodeTier != "" && r.Device == "" {
			tier = "(node: " + r.NodeTier + ")"
		}
		cells := []string{r.Pod, dash(r.Claim), dash(req), dash(r.DeviceRef()), dash(tier), dash(r.Node), status}
		if partitions {
			cells = slices.Insert(cells, 4, dash(r.partition()))
		}
		if aligned {
			cells = slices.Insert(cells, len(cells)-2, dash(strings.Join(r.Aligned, "; ")))
		}
		body = append(body, cells)
	}
	return header, body
}

// partition says which part of its device a row holds: a MIG profile, or
// the memory a share consumes and its share ID.
func (r Row) partition() string {
	switch {
	case r.Profile != "":
		return "MIG " + r.Profile
	case r.TimeSlice:
		return "time slice"
	case r.ShareID != "" && r.Consumed != "":
		return r.Consumed + " (share " + r.ShareID + ")"
	case r.ShareID != "":
		return "share " + r.ShareID
	}
	return ""
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// GroupOf is the PodGroup a pod joins (spec.schedulingGroup), "" for none.
func GroupOf(pod *v1.Pod) string {
	if g := pod.Spec.SchedulingGroup; g != nil && g.PodGroupName != nil {
		return *g.PodGroupName
	}
	return ""
}

// lessName orders names as a template numbers them: of two names that
// differ only in their trailing number, the shorter first (p-9 before
// p-10); any others in text order.
func lessName(a, b string) bool {
	pa, pb := strings.TrimRight(a, "0123456789"), strings.TrimRight(b, "0123456789")
	if pa == pb && len(a) != len(b) {
		return len(a) < len(b)
	}
	return a < b
}

// readOlderTaintRules lists DeviceTaintRules at resource.k8s.io/v1beta2,
// the version Kubernetes 1.33–1.36 serve them at, read as v1 (the fields
// the allocator reads have the same names and meaning).
func readOlderTaintRules(ctx context.Context, client kubernetes.Interface) ([]resourceapi.DeviceTaintRule, error) {
	old, err := listAll(ctx, "devicetaintrules", metav1.ListOptions{}, func(ctx context.Context, o metav1.ListOptions) ([]resourcev1beta2.DeviceTaintRule, string, error) {
		l, err := client.ResourceV1beta2().DeviceTaintRules().List(ctx, o)
		return itemsOf(l, err, func(l *resourcev1beta2.DeviceTaintRuleList) ([]resourcev1beta2.DeviceTaintRule, metav1.ListMeta) {
			return l.Items, l.ListMeta
		})
	})
	if err != nil {
		return nil, err
	}
	raw, err := json.Marshal(old)
	if err != nil {
		return nil, fmt.Errorf("reading v1beta2 DeviceTaintRules as v1: %w", err)
	}
	var rules []resourceapi.DeviceTaintRule
	if err := json.Unmarshal(raw, &rules); err != nil {
		return nil, fmt.Errorf("reading v1beta2 DeviceTaintRules as v1: %w", err)
	}
	return rules, nil
}
