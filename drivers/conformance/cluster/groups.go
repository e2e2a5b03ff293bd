package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedulingv1beta1 "k8s.io/api/scheduling/v1beta1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// groupMembers is how many pods of a PodGroup share its claim in the
// group-claim check.
const groupMembers = 2

// groupClaim checks DRAWorkloadResourceClaims: a PodGroup lists a claim
// template in spec.resourceClaims, and its pods refer to the same entry
// (name and template) in their own. The controller makes one claim for the
// group; it must be reserved for the PodGroup, not for its pods; every pod
// must name it in its status and prove the device it was allocated, the
// same device for all (a node-local device puts them on one node).
func (s *suite) groupClaim(ctx context.Context, logf logFunc, k *kit) error {
	if served, err := servesPodGroups(k.client); err != nil {
		return err
	} else if !served {
		return skipCheck{"the cluster does not serve podgroups.scheduling.k8s.io/v1beta1: turn on the gates GenericWorkload and DRAWorkloadResourceClaims and that API version"}
	}
	const template, entry, group = "group-dev", "dev", "group"
	t := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: k.meta(template),
		Spec: resourceapi.ResourceClaimTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: k.labels()}, Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{k.request("dev")}},
		}},
	}
	if _, err := k.client.ResourceV1().ResourceClaimTemplates(k.ns).Create(ctx, t, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("claim template %s: %w", template, err)
	}
	pg := &schedulingv1beta1.PodGroup{
		ObjectMeta: k.meta(group),
		Spec: schedulingv1beta1.PodGroupSpec{
			SchedulingPolicy: schedulingv1beta1.PodGroupSchedulingPolicy{Gang: &schedulingv1beta1.GangSchedulingPolicy{MinCount: groupMembers}},
			ResourceClaims:   []schedulingv1beta1.PodGroupResourceClaim{{Name: entry, ResourceClaimTemplateName: ptr.To(template)}},
		},
	}
	if _, err := k.client.SchedulingV1beta1().PodGroups(k.ns).Create(ctx, pg, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("PodGroup %s: %w", group, err)
	}
	k.groups = append(k.groups, group)
	var members []string
	for i := range groupMembers {
		name := fmt.Sprintf("member-%d", i)
		err := k.pod(ctx, name, nil, func(p *v1.Pod) {
			p.Spec.SchedulingGroup = &v1.PodSchedulingGroup{PodGroupName: ptr.To(group)}
			p.Spec.ResourceClaims = []v1.PodResourceClaim{{Name: entry, ResourceClaimTemplateName: ptr.To(template)}}
			p.Spec.Containers[0].Resources.Claims = []v1.ResourceClaim{{Name: entry}}
		})
		if err != nil {
			return err
		}
		members = append(members, name)
	}
	var proofs []string
	for _, name := range members {
		v, err := k.proof(ctx, name)
		if err != nil {
			return err
		}
		proofs = append(proofs, v)
	}
	if proofs[0] != proofs[1] {
		return fmt.Errorf("the pods of group %s share its claim, but prove different devices: %q and %q", group, proofs[0], proofs[1])
	}

	got, err := k.client.SchedulingV1beta1().PodGroups(k.ns).Get(ctx, group, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if len(got.Spec.ResourceClaims) == 0 {
		return errors.New("the API server dropped the PodGroup's spec.resourceClaims: turn on the gate DRAWorkloadResourceClaims")
	}
	i := slices.IndexFunc(got.Status.ResourceClaimStatuses, func(st schedulingv1beta1.PodGroupResourceClaimStatus) bool { return st.Name == entry })
	if i < 0 || got.Status.ResourceClaimStatuses[i].ResourceClaimName == nil {
		return fmt.Errorf("PodGroup %s runs its pods, but its status.resourceClaimStatuses names no claim for %s: %+v", group, entry, got.Status.ResourceClaimStatuses)
	}
	claimName := *got.Status.ResourceClaimStatuses[i].ResourceClaimName
	claim, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, claimName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("the group's claim %s: %w", claimName, err)
	}
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		return fmt.Errorf("the group's claim %s runs two pods but is not allocated one device: %+v", claimName, claim.Status.Allocation)
	}
	if r := claim.Status.ReservedFor; len(r) != 1 || r[0].Resource != "podgroups" || r[0].Name != group {
		return fmt.Errorf("the group's claim %s is reserved for %+v, want the PodGroup %s alone", claimName, r, group)
	}
	for _, name := range members {
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(pod.Status.ResourceClaimStatuses, func(st v1.PodResourceClaimStatus) bool {
			return st.Name == entry && ptr.Deref(st.ResourceClaimName, "") == claimName
		}) {
			return fmt.Errorf("pod %s of group %s names claims %+v, not the group's %s", name, group, pod.Status.ResourceClaimStatuses, claimName)
		}
	}
	// Each proof was bound to the pod's allocation as it came in: both
	// name the group claim's one device.
	d := claim.Status.Allocation.Devices.Results[0]
	logf("group %s: claim %s, reserved for the group, holds %s/%s; pods %v both prove %q", group, claimName, d.Pool, d.Device, members, proofs[0])
	return nil
}

// servesPodGroups tells whether the API server serves PodGroups.
func servesPodGroups(client kubernetes.Interface) (bool, error) {
	list, err := client.Discovery().ServerResourcesForGroupVersion(schedulingv1beta1.SchemeGroupVersion.String())
	switch {
	case apierrors.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("discovering %s: %w", schedulingv1beta1.SchemeGroupVersion, err)
	}
	return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == "podgroups" }), nil
}
