package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/drivers/gpu"
	"github.com/dralab/dralab/internal/kubeapply"
	"github.com/dralab/dralab/internal/nodedrivers"
)

func (r *run) act(ctx context.Context, st Step) error {
	r.gone = nil
	switch {
	case len(st.Apply) > 0:
		for _, f := range st.Apply {
			if err := r.applyFile(ctx, f); err != nil {
				return err
			}
		}
	case st.CreatePods != nil:
		return r.createPods(ctx, st.CreatePods)
	case st.DeletePods != nil:
		return r.deletePods(ctx, st.DeletePods)
	case st.DeleteGroups != nil:
		return r.deleteGroups(ctx, st.DeleteGroups)
	case st.TaintAllocated != nil:
		return r.taintAllocated(ctx, st.TaintAllocated)
	case st.FailGPU != nil:
		return r.failGPU(ctx, st.FailGPU)
	case st.HealGPU != nil:
		return r.healGPUs(ctx)
	}
	return nil
}

// failGPU fails the GPUs some pods hold and waits until each pod's status
// reports its device Unhealthy and each device carries the XID's taint:
// the pods' status is watched from before the failure, as an evicted pod
// may be gone soon after.
func (r *run) failGPU(ctx context.Context, f *FailGPU) error {
	xid := f.XID
	if xid == 0 {
		xid = gpu.DefaultXID
	}
	fault, isFault := gpu.LookupXID(xid).Fault()
	rows, err := allocation.Allocations(ctx, r.Client, r.ns, nodedrivers.Vocabulary)
	if err != nil {
		return err
	}
	var held []allocation.Row
	for _, row := range rows {
		if ok, _ := path.Match(f.Pods, row.Pod); ok && row.Device != "" && row.Driver == gpu.DriverName {
			held = append(held, row)
		}
	}
	if len(held) == 0 {
		return fmt.Errorf("failGPU: no pod matching %s holds a GPU of %s", f.Pods, gpu.DriverName)
	}
	list, err := r.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	w, err := r.Client.CoreV1().Pods(r.ns).Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		return err
	}
	defer w.Stop()
	for _, row := range held {
		if err := r.GPUFaults.FailGPU(ctx, row.Node, row.Device, xid); err != nil {
			return fmt.Errorf("failGPU %s/%s: %w", row.Node, row.Device, err)
		}
		r.failed = append(r.failed, [2]string{row.Node, row.Device})
	}
	if !isFault {
		return nil
	}
	// Each pod's status must say Unhealthy while it still exists.
	unhealthy := map[string]bool{}
	for _, row := range held {
		unhealthy[row.Pod] = false
	}
	deadline := time.After(r.StepTimeout)
	for slices.Contains(slices.Collect(maps.Values(unhealthy)), false) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return errors.New("failGPU: the watch of the pods ended")
			}
			p, isPod := ev.Object.(*v1.Pod)
			if !isPod {
				continue
			}
			if _, ok := unhealthy[p.Name]; !ok {
				continue
			}
			for _, c := range p.Status.ContainerStatuses {
				for _, rs := range c.AllocatedResourcesStatus {
					for _, h := range rs.Resources {
						if h.Health == v1.ResourceHealthStatusUnhealthy {
							unhealthy[p.Name] = true
						}
					}
				}
			}
		case <-deadline:
			return fmt.Errorf("failGPU: within %v the status of these pods did not report their GPU Unhealthy: %v", r.StepTimeout, unhealthy)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// And each device carries the fault's taint.
	want := fault.Taint.Key + "=" + fault.Taint.Value + ":" + string(fault.Taint.Effect)
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, r.StepTimeout, true, func(ctx context.Context) (bool, error) {
		snap, err := allocation.Read(ctx, r.Client, r.ns, nodedrivers.Vocabulary)
		if err != nil {
			return false, nil
		}
		for _, row := range held {
			if !slices.Contains(snap.DeviceTaints(row.Driver, row.Pool, row.Device), want) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("failGPU: the failed devices do not carry the taint %s: %w", want, err)
	}
	if fault.Taint.Effect == resourceapi.DeviceTaintEffectNoExecute {
		for _, row := range held {
			r.gone = append(r.gone, row.Pod)
		}
	}
	return nil
}

// healGPUs heals every GPU the scenario failed.
func (r *run) healGPUs(ctx context.Context) error {
	var errs []error
	for _, g := range r.failed {
		if err := r.GPUFaults.HealGPU(ctx, g[0], g[1]); err != nil {
			errs = append(errs, fmt.Errorf("healGPU %s/%s: %w", g[0], g[1], err))
		}
	}
	r.failed = nil
	return errors.Join(errs...)
}

// objects decodes a manifest file of the scenario.
func (r *run) objects(file string) ([]*unstructured.Unstructured, error) {
	data, err := r.s.File(file)
	if err != nil {
		return nil, err
	}
	return kubeapply.Decode(r.s.Source(file), data)
}

func (r *run) applyFile(ctx context.Context, file string) error {
	objs, err := r.objects(file)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := r.apply(ctx, obj); err != nil {
			return fmt.Errorf("%s: %s %s: %w", r.s.Source(file), obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// apply creates an object of the scenario; cluster-scoped ones are
// remembered for cleanup.
func (r *run) apply(ctx context.Context, obj *unstructured.Unstructured) error {
	// A cluster-scoped object is the cluster's, not the namespace's: the
	// run labels what it creates, applies over only what carries its
	// label (an interrupted run's), and deletes only that.
	labels := obj.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels[LabelManagedBy], labels[LabelRun] = fieldManager, r.ns
	obj.SetLabels(labels)
	a := kubeapply.Applier{Dynamic: r.Dynamic, Mapper: r.Mapper, FieldManager: fieldManager, RefuseDropped: true,
		Owned: func(existing *unstructured.Unstructured) bool {
			return existing.GetLabels()[LabelManagedBy] == fieldManager
		}}
	clusterScoped, err := a.Apply(ctx, obj, r.ns)
	var dropped *kubeapply.DroppedError
	if clusterScoped && (err == nil || errors.As(err, &dropped)) {
		r.clusterObjects = append(r.clusterObjects, obj)
	}
	// A field the cluster's API server drops is a feature the cluster
	// does not have: the scenario cannot run here, which is not its
	// failure.
	if errors.As(err, &dropped) {
		return fmt.Errorf("%w: %w", ErrUnmet, dropped)
	}
	return err
}

func (r *run) createPods(ctx context.Context, c *CreatePods) error {
	var pods []*unstructured.Unstructured
	for _, f := range c.Files() {
		objs, err := r.objects(f)
		if err != nil {
			return err
		}
		if len(objs) != 1 || objs[0].GetKind() != "Pod" {
			return fmt.Errorf("%s: createPods needs a file with exactly one Pod", r.s.Source(f))
		}
		pods = append(pods, objs[0])
	}
	n := r.inv.Resolve(&c.Replicas)
	if c.Group != "" {
		return r.createGroups(ctx, c, pods, n)
	}
	for i := range n {
		for j, manifest := range pods {
			pod := manifest.DeepCopy()
			pod.SetName(fmt.Sprintf("%s-%d", manifest.GetName(), i))
			if err := r.apply(ctx, pod); err != nil {
				return fmt.Errorf("%s: pod %s: %w", r.s.Source(c.Files()[j]), pod.GetName(), err)
			}
			// One at a time: the order of allocation is the order of creation.
			if err := r.waitScheduled(ctx, pod.GetName()); err != nil {
				return err
			}
		}
	}
	return nil
}

// createGroups makes each pod manifest's n copies a PodGroup of the group
// manifest, named as the manifest's pod, and creates every group's pods at
// once.
func (r *run) createGroups(ctx context.Context, c *CreatePods, pods []*unstructured.Unstructured, n int) error {
	objs, err := r.objects(c.Group)
	if err != nil {
		return err
	}
	if len(objs) != 1 || objs[0].GetKind() != "PodGroup" {
		return fmt.Errorf("%s: createPods' group needs a file with exactly one PodGroup", r.s.Source(c.Group))
	}
	var names []string
	for j, manifest := range pods {
		group := objs[0].DeepCopy()
		group.SetName(manifest.GetName())
		if gang, ok, _ := unstructured.NestedMap(group.Object, "spec", "schedulingPolicy", "gang"); ok {
			if _, has := gang["minCount"]; !has {
				if err := unstructured.SetNestedField(group.Object, int64(n), "spec", "schedulingPolicy", "gang", "minCount"); err != nil {
					return err
				}
			}
		}
		if err := r.apply(ctx, group); err != nil {
			return fmt.Errorf("%s: PodGroup %s: %w", r.s.Source(c.Group), group.GetName(), err)
		}
		for i := range n {
			pod := manifest.DeepCopy()
			pod.SetName(fmt.Sprintf("%s-%d", manifest.GetName(), i))
			if err := unstructured.SetNestedField(pod.Object, group.GetName(), "spec", "schedulingGroup", "podGroupName"); err != nil {
				return err
			}
			if err := r.apply(ctx, pod); err != nil {
				return fmt.Errorf("%s: pod %s: %w", r.s.Source(c.Files()[j]), pod.GetName(), err)
			}
			names = append(names, pod.GetName())
		}
	}
	for _, name := range names {
		if err := r.waitScheduled(ctx, name); err != nil {
			return err
		}
	}
	return nil
}

func (r *run) waitScheduled(ctx context.Context, name string) error {
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, r.StepTimeout, true, func(ctx context.Context) (bool, error) {
		pod, err := r.Client.CoreV1().Pods(r.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return pod.Spec.NodeName != "" || allocation.Unschedulable(pod), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s was neither scheduled nor found unschedulable: %w", name, err)
	}
	return nil
}

// freeing deletes a pod the way that frees its devices: gracefully (one
// second), so that its kubelet stops it and unprepares its claims before
// the API lets the claims go and the scheduler hands their devices on. A
// pod deleted at once (grace 0) is gone from the API while its node still
// holds its devices; a driver refuses to prepare them for the next claim
// until then, and a kubelet retries that prepare only at its sync
// interval (a minute by default, as on kind's nodes).
var freeing = metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](1)}

func (r *run) deletePods(ctx context.Context, d *DeletePods) error {
	rows, err := allocation.Allocations(ctx, r.Client, r.ns, nodedrivers.Vocabulary)
	if err != nil {
		return err
	}
	want, deleted := -1, 0
	if d.Count != nil {
		want = r.inv.Resolve(d.Count)
	}
	for _, o := range Outcomes(rows) {
		if deleted == want {
			break
		}
		if ok, _ := path.Match(d.Pods, o.Name); !ok || (d.Tier != "" && podTier(o) != d.Tier) || (d.Phase != "" && o.phase() != d.Phase) {
			continue
		}
		if err := r.Client.CoreV1().Pods(r.ns).Delete(ctx, o.Name, freeing); err != nil {
			return err
		}
		r.gone = append(r.gone, o.Name)
		deleted++
	}
	if deleted < want || (want < 0 && deleted == 0) {
		return fmt.Errorf("deletePods: found %d of %s pods matching %s (tier %q, phase %q) to delete", deleted, d.Count.String(), d.Pods, d.Tier, d.Phase)
	}
	return nil
}

// deleteGroups deletes the PodGroups matching a pattern and their pods.
func (r *run) deleteGroups(ctx context.Context, d *DeleteGroups) error {
	groups, err := r.Client.SchedulingV1beta1().PodGroups(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("deleteGroups: %w", err)
	}
	pods, err := r.Client.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	deleted := 0
	for _, g := range groups.Items {
		if ok, _ := path.Match(d.Groups, g.Name); !ok {
			continue
		}
		for _, p := range pods.Items {
			if allocation.GroupOf(&p) != g.Name {
				continue
			}
			if err := r.Client.CoreV1().Pods(r.ns).Delete(ctx, p.Name, freeing); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			r.gone = append(r.gone, p.Name)
		}
		if err := r.Client.SchedulingV1beta1().PodGroups(r.ns).Delete(ctx, g.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		deleted++
	}
	if deleted == 0 {
		return fmt.Errorf("deleteGroups: no PodGroup matches %s", d.Groups)
	}
	return nil
}

func (r *run) taintAllocated(ctx context.Context, t *TaintAllocated) error {
	rows, err := allocation.Allocations(ctx, r.Client, r.ns, nodedrivers.Vocabulary)
	if err != nil {
		return err
	}
	rows = slices.DeleteFunc(rows, func(row allocation.Row) bool {
		ok, _ := path.Match(t.Pods, row.Pod)
		return !ok || row.Device == ""
	})
	if len(rows) == 0 {
		return fmt.Errorf("taintAllocated: no pod matching %s holds a device", t.Pods)
	}
	if err := r.onlyOurs(ctx, rows); err != nil {
		return err
	}
	n := 0
	var made []string
	for _, row := range rows {
		rule := &resourceapi.DeviceTaintRule{
			TypeMeta:   metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "DeviceTaintRule"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%s-%d", r.ns, row.Device, n)},
			Spec: resourceapi.DeviceTaintRuleSpec{
				DeviceSelector: &resourceapi.DeviceTaintSelector{Driver: ptr.To(row.Driver), Pool: ptr.To(row.Pool), Device: ptr.To(row.Device)},
				Taint:          resourceapi.DeviceTaint{Key: t.Key, Value: t.Value, Effect: resourceapi.DeviceTaintEffect(t.Effect)},
			},
		}
		u, err := toUnstructured(rule)
		if err != nil {
			return err
		}
		if err := r.apply(ctx, u); err != nil {
			return fmt.Errorf("DeviceTaintRule for %s: %w", row.DeviceRef(), err)
		}
		made = append(made, rule.Name)
		if t.Effect == string(resourceapi.DeviceTaintEffectNoExecute) {
			r.gone = append(r.gone, row.Pod)
		}
		n++
	}
	return r.stillOnlyOurs(ctx, rows, made)
}

// stillOnlyOurs checks again, once the rules are made, that no claim of
// another namespace holds a device they taint: one may have been given it
// between the first check and the rules. If one has, the rules made are
// removed at once, and the step fails saying whose claim it was.
func (r *run) stillOnlyOurs(ctx context.Context, rows []allocation.Row, made []string) error {
	err := r.onlyOurs(ctx, rows)
	if err == nil {
		return nil
	}
	_, derr := deleteNamed(ctx, "DeviceTaintRule", made, r.Client.ResourceV1().DeviceTaintRules().Delete)
	return errors.Join(fmt.Errorf("a claim of another namespace was given a device while the scenario tainted it; its DeviceTaintRules are removed: %w", err), derr)
}

// onlyOurs refuses, before any rule is made, to taint a device that a
// claim of another namespace holds too (a share of it, or admin access):
// on a shared cluster a taint rule on it would keep it from its other
// users, and one with effect NoExecute would evict their pods.
func (r *run) onlyOurs(ctx context.Context, rows []allocation.Row) error {
	claims, err := r.Client.ResourceV1().ResourceClaims(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("taintAllocated: listing the cluster's claims, to taint no device another holds: %w", err)
	}
	var errs []error
	for _, row := range rows {
		for _, c := range claims.Items {
			if c.Namespace == r.ns || c.Status.Allocation == nil {
				continue
			}
			if slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(res resourceapi.DeviceRequestAllocationResult) bool {
				return res.Driver == row.Driver && res.Pool == row.Pool && res.Device == row.Device
			}) {
				errs = append(errs, fmt.Errorf("taintAllocated: device %s of pod %s is also held by claim %s/%s, which this scenario did not create: a DeviceTaintRule on it would reach that claim's pods; the scenario taints only devices that its own claims alone hold",
					row.DeviceRef(), row.Pod, c.Namespace, c.Name))
			}
		}
	}
	return errors.Join(errs...)
}

func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}
