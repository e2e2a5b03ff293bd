package soak

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/cluster"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/natural"
	"github.com/dralab/dralab/internal/nodedrivers"
	"github.com/dralab/dralab/internal/realnode"
)

// Namespace is where the soak's pods and claims live.
const Namespace = "dralab-soak"

// Kinds of claims the soak churns.
const (
	KindExact          = "exact"
	KindFirstAvailable = "first-available"
	KindSharedClaim    = "shared-claim"
	KindExtended       = "extended-resource"
	KindMIG            = "mig"
	KindSharedMemory   = "shared-memory"
)

// extendedResource is the extended resource name of the soak's DeviceClass
// of whole GPUs.
const (
	extendedClass    = "soak-gpu.gpu.dralab.dev"
	extendedResource = "dralab.dev/soak-gpu"
)

// inventory is what the lab's GPU driver publishes, as far as the soak's
// kinds of claims care.
type inventory struct {
	// tiers with whole GPUs, in gpu.Tiers order; sharedTiers those of
	// GPUs that several claims may share; migProfiles the MIG profiles.
	tiers       []string
	sharedTiers []string
	migProfiles []string
}

// readInventory reads the GPU driver's devices from the slices.
func readInventory(ctx context.Context, slices []resourceapi.ResourceSlice) (inventory, error) {
	var inv inventory
	tiers, shared, profiles := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i := range slices {
		s := &slices[i]
		if s.Spec.Driver != gpu.DriverName {
			continue
		}
		for j := range s.Spec.Devices {
			d := &s.Spec.Devices[j]
			switch attr(d, gpu.AttrType) {
			case gpu.TypeMIG:
				profiles[attr(d, gpu.AttrProfile)] = true
			case gpu.TypeGPU:
				tier, err := nodedrivers.Vocabulary.Tier(ctx, gpu.DriverName, d)
				if err != nil {
					return inv, err
				}
				if tier == "" {
					continue
				}
				tiers[tier] = true
				if ptr.Deref(d.AllowMultipleAllocations, false) {
					shared[tier] = true
				}
			}
		}
	}
	for _, t := range gpu.Tiers {
		if tiers[t.Name] {
			inv.tiers = append(inv.tiers, t.Name)
		}
		if shared[t.Name] {
			inv.sharedTiers = append(inv.sharedTiers, t.Name)
		}
	}
	for p := range profiles {
		inv.migProfiles = append(inv.migProfiles, p)
	}
	sort.Slice(inv.migProfiles, func(i, j int) bool { return natural.Less(inv.migProfiles[i], inv.migProfiles[j]) })
	return inv, nil
}

func attr(d *resourceapi.Device, name resourceapi.QualifiedName) string {
	if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
		return *a.StringValue
	}
	return ""
}

// kinds are the kinds of claims the inventory can serve.
func (inv inventory) kinds() []string {
	var out []string
	if len(inv.tiers) > 0 {
		out = append(out, KindExact, KindFirstAvailable, KindSharedClaim, KindExtended)
	}
	if len(inv.migProfiles) > 0 {
		out = append(out, KindMIG)
	}
	if len(inv.sharedTiers) > 0 {
		out = append(out, KindSharedMemory)
	}
	return out
}

// ErrNoGPUs means the lab publishes no GPU of dralab's driver to churn.
var ErrNoGPUs = errors.New("the lab publishes no GPU of dralab's GPU driver")

// group is what one churn step creates and a later one deletes: pods and,
// for a shared claim, the claim they share.
type group struct {
	kind  string
	pods  []string
	claim string
}

// workload creates and deletes the soak's groups.
type workload struct {
	client kubernetes.Interface
	inv    inventory
	rng    *rand.Rand
	next   int
}

// setup creates the soak's namespace and its DeviceClass of whole GPUs
// with an extended resource name.
func (w *workload) setup(ctx context.Context) error {
	ns := &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}
	if err := cluster.CreateNamespace(ctx, w.client, ns); err != nil {
		return fmt.Errorf("creating namespace %s: %w", Namespace, err)
	}
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: extendedClass},
		Spec: resourceapi.DeviceClassSpec{
			ExtendedResourceName: ptr.To(extendedResource),
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(
				`device.driver == %q && has(device.attributes[%q].%s) && device.attributes[%q].%s == %q`,
				gpu.DriverName, gpu.DriverName, gpu.AttrType, gpu.DriverName, gpu.AttrType, gpu.TypeGPU)}}},
		},
	}
	if _, err := w.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating DeviceClass %s: %w", extendedClass, err)
	}
	return nil
}

// create creates a group of a kind: its claim template or claim, and its
// pods.
func (w *workload) create(ctx context.Context, kind string) (group, error) {
	w.next++
	name := fmt.Sprintf("%s-%d", kind, w.next)
	g := group{kind: kind, pods: []string{name}}
	var podClaim v1.PodResourceClaim
	switch kind {
	case KindExtended:
		pod := w.pod(name, nil)
		q := resource.MustParse("1")
		pod.Spec.Containers[0].Resources.Limits = v1.ResourceList{extendedResource: q}
		pod.Spec.Containers[0].Resources.Requests = v1.ResourceList{extendedResource: q}
		_, err := w.client.CoreV1().Pods(Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return g, err
	case KindSharedClaim:
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{w.request(kind)}}},
		}
		if _, err := w.client.ResourceV1().ResourceClaims(Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			return g, err
		}
		g.claim, g.pods = name, []string{name + "-a", name + "-b"}
		podClaim = v1.PodResourceClaim{Name: "gpu", ResourceClaimName: ptr.To(name)}
	default:
		tmpl := &resourceapi.ResourceClaimTemplate{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
			Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
				Requests: []resourceapi.DeviceRequest{w.request(kind)}}}},
		}
		if _, err := w.client.ResourceV1().ResourceClaimTemplates(Namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
			return g, err
		}
		podClaim = v1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(name)}
	}
	for _, p := range g.pods {
		if _, err := w.client.CoreV1().Pods(Namespace).Create(ctx, w.pod(p, &podClaim), metav1.CreateOptions{}); err != nil {
			return g, err
		}
	}
	return g, nil
}

// request is the one request of a kind's claim.
func (w *workload) request(kind string) resourceapi.DeviceRequest {
	pick := func(from []string) string { return from[w.rng.IntN(len(from))] }
	exactly := func(class string) *resourceapi.ExactDeviceRequest {
		return &resourceapi.ExactDeviceRequest{DeviceClassName: class}
	}
	req := resourceapi.DeviceRequest{Name: "gpu"}
	switch kind {
	case KindExact:
		req.Exactly = exactly(tierClass(pick(w.inv.tiers)))
	case KindSharedClaim:
		req.Exactly = exactly(gpu.ClassAny)
	case KindFirstAvailable:
		for _, t := range w.inv.tiers {
			req.FirstAvailable = append(req.FirstAvailable, resourceapi.DeviceSubRequest{Name: t, DeviceClassName: tierClass(t)})
		}
	case KindMIG:
		req.Exactly = exactly(gpu.ClassMIG)
		req.Exactly.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.attributes[%q].%s == %q`, gpu.DriverName, gpu.AttrProfile, pick(w.inv.migProfiles))}}}
	case KindSharedMemory:
		req.Exactly = exactly(tierClass(pick(w.inv.sharedTiers)))
		req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
			gpu.CapacityMemory: resource.MustParse(pick([]string{"2Gi", "4Gi", "7Gi"}))}}
	}
	return req
}

func tierClass(tier string) string {
	for _, t := range gpu.Tiers {
		if t.Name == tier {
			return t.ClassName()
		}
	}
	return gpu.ClassAny
}

// pod is one of the soak's pods: a shell that sleeps, from an image every
// lab node has (a real node imports it; a hollow one runs nothing).
func (w *workload) pod(name string, claim *v1.PodResourceClaim) *v1.Pod {
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: v1.PodSpec{
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers: []v1.Container{{
				Name: "work", Image: realnode.BusyboxImage, ImagePullPolicy: v1.PullIfNotPresent,
				Command: []string{"sleep", "1000000"},
			}},
		},
	}
	if claim != nil {
		p.Spec.ResourceClaims = []v1.PodResourceClaim{*claim}
		p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: claim.Name}}
	}
	return p
}

// delete deletes a group's pods and then its claim or template; the claim
// controller deallocates a shared claim once its pods are gone. Objects
// already gone (a pod evicted by a device taint) are not an error.
func (w *workload) delete(ctx context.Context, g group) error {
	var errs []error
	ignore := func(err error) error {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	for _, p := range g.pods {
		errs = append(errs, ignore(w.client.CoreV1().Pods(Namespace).Delete(ctx, p, metav1.DeleteOptions{})))
	}
	switch {
	case g.claim != "":
		errs = append(errs, ignore(w.client.ResourceV1().ResourceClaims(Namespace).Delete(ctx, g.claim, metav1.DeleteOptions{})))
	case g.kind != KindExtended:
		errs = append(errs, ignore(w.client.ResourceV1().ResourceClaimTemplates(Namespace).Delete(ctx, g.pods[0], metav1.DeleteOptions{})))
	}
	return errors.Join(errs...)
}

// shuffled returns the names in a random order.
func shuffled(rng *rand.Rand, names []string) []string {
	out := slices.Clone(names)
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}
