package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// bindingConditions checks a device with binding conditions: a pod whose
// claim is allocated one is not bound while the conditions are not all
// True in the claim's device status (seen: claim allocated with the
// device's binding conditions in its result and unmet, pod unbound, claim
// still so), and is bound and proves its device once they are. A pod
// seen bound while the claim, read after it, lacks a condition fails the
// check, as does a failure condition.
func (s *suite) bindingConditions(ctx context.Context, logf logFunc, k *kit) error {
	spec := s.m.BindingConditions
	d, node, pin, err := k.withBindingConditions(ctx)
	if err != nil {
		return err
	}
	req := resourceapi.DeviceRequest{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: spec.DeviceClass}}
	for _, e := range []string{spec.Selector, pin} {
		if e != "" {
			req.Exactly.Selectors = append(req.Exactly.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: e}})
		}
	}
	const name = "waits"
	if err := k.createClaim(ctx, name, req); err != nil {
		return err
	}
	start := time.Now()
	if err := k.pod(ctx, name, []string{name}, onNodes([]string{node})); err != nil {
		return err
	}
	var (
		waited      bool
		allocatedAt time.Duration
		result      resourceapi.DeviceRequestAllocationResult
	)
	err = poll(ctx, k.m.Timeouts.PodRunning, fmt.Sprintf("pod %s to be bound once the binding conditions %v of %s/%s are met", name, d.dev.BindingConditions, d.pool, d.dev.Name), func(ctx context.Context) (string, bool, error) {
		before, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		after, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return "", false, err
		}
		if after.Status.Allocation == nil {
			if pod.Spec.NodeName != "" {
				return "", false, settle(fmt.Errorf("pod %s is bound to %s with claim %s not allocated", name, pod.Spec.NodeName, name))
			}
			return "claim not allocated, pod " + podState(pod), false, k.keptOff(ctx, pod)
		}
		r, err := bindingResult(after, d)
		if err != nil {
			return "", false, settle(err)
		}
		if allocatedAt == 0 {
			allocatedAt, result = time.Since(start), r
		}
		if failed := conditionsTrue(after, r, r.BindingFailureConditions); len(failed) > 0 {
			return "", false, settle(fmt.Errorf("claim %s: the failure condition %s of %s/%s is True: the device could not be bound", name, strings.Join(failed, ", "), r.Pool, r.Device))
		}
		unmet := unmetConditions(after, r)
		if pod.Spec.NodeName != "" {
			if len(unmet) > 0 {
				return "", false, settle(fmt.Errorf("pod %s is bound to %s while the binding conditions %v of %s/%s are not all True in claim %s's status (%s)", name, pod.Spec.NodeName, unmet, r.Pool, r.Device, name, deviceConditions(after, r)))
			}
			return "", true, nil
		}
		if before.Status.Allocation != nil && len(unmet) > 0 && len(unmetConditions(before, r)) > 0 && sameResult(before, r) {
			waited = true
		}
		return fmt.Sprintf("pod %s unbound, claim allocated %s/%s with conditions %s", name, r.Pool, r.Device, deviceConditions(after, r)), false, nil
	})
	if err != nil {
		return err
	}
	boundAt := time.Since(start)
	if !waited {
		return fmt.Errorf("pod %s was bound %v after its claim was allocated, and never seen unbound with the claim allocated and its binding conditions %v unmet: the conditions were set before the suite could see the pod wait (every %v); make the controller that sets them take longer", name, boundAt-allocatedAt, result.BindingConditions, pollInterval)
	}
	v, err := k.proof(ctx, name)
	if err != nil {
		return err
	}
	logf("pod %s waited unbound while %s/%s on node %s had binding conditions %v unmet (allocated after %v, bound after %v), then runs and proves %q",
		name, result.Pool, result.Device, node, result.BindingConditions, allocatedAt.Round(time.Millisecond), boundAt.Round(time.Millisecond), v)
	return nil
}

// bindingResult is the claim's allocation result of device d, which must
// carry d's binding and failure conditions.
func bindingResult(c *resourceapi.ResourceClaim, d device) (resourceapi.DeviceRequestAllocationResult, error) {
	rs := c.Status.Allocation.Devices.Results
	if len(rs) != 1 || rs[0].Driver != d.driver || rs[0].Pool != d.pool || rs[0].Device != d.dev.Name {
		return resourceapi.DeviceRequestAllocationResult{}, fmt.Errorf("claim %s got %v, want device %s/%s", c.Name, rs, d.pool, d.dev.Name)
	}
	r := rs[0]
	if !slices.Equal(r.BindingConditions, d.dev.BindingConditions) || !slices.Equal(r.BindingFailureConditions, d.dev.BindingFailureConditions) {
		return r, fmt.Errorf("claim %s's result for %s/%s has binding conditions %v and failure conditions %v, want the device's %v and %v",
			c.Name, r.Pool, r.Device, r.BindingConditions, r.BindingFailureConditions, d.dev.BindingConditions, d.dev.BindingFailureConditions)
	}
	return r, nil
}

func sameResult(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) bool {
	return slices.ContainsFunc(c.Status.Allocation.Devices.Results, func(o resourceapi.DeviceRequestAllocationResult) bool {
		return o.Driver == r.Driver && o.Pool == r.Pool && o.Device == r.Device
	})
}

// deviceStatus is the claim's status entry of the result's device.
func deviceStatus(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) *resourceapi.AllocatedDeviceStatus {
	for i, s := range c.Status.Devices {
		if s.Driver == r.Driver && s.Pool == r.Pool && s.Device == r.Device && ptr.Deref(s.ShareID, "") == string(ptr.Deref(r.ShareID, "")) {
			return &c.Status.Devices[i]
		}
	}
	return nil
}

// conditionsTrue are the types among types that are True in the device's
// status.
func conditionsTrue(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult, types []string) []string {
	s := deviceStatus(c, r)
	if s == nil {
		return nil
	}
	var out []string
	for _, cond := range s.Conditions {
		if cond.Status == metav1.ConditionTrue && slices.Contains(types, cond.Type) {
			out = append(out, cond.Type)
		}
	}
	return out
}

// unmetConditions are the result's binding conditions not True in the
// claim's status.
func unmetConditions(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) []string {
	met := conditionsTrue(c, r, r.BindingConditions)
	return slices.DeleteFunc(slices.Clone(r.BindingConditions), func(t string) bool { return slices.Contains(met, t) })
}

// deviceConditions says what the device's status entry holds.
func deviceConditions(c *resourceapi.ResourceClaim, r resourceapi.DeviceRequestAllocationResult) string {
	s := deviceStatus(c, r)
	if s == nil || len(s.Conditions) == 0 {
		return "none"
	}
	var out []string
	for _, cond := range s.Conditions {
		out = append(out, cond.Type+"="+string(cond.Status))
	}
	return strings.Join(out, ", ")
}

// withBindingConditions finds a free device of the manifest's
// bindingConditions class and selector that publishes binding conditions,
// and a selector naming it among its node's devices.
func (k *kit) withBindingConditions(ctx context.Context) (device, string, string, error) {
	spec := k.m.BindingConditions
	d, node, expr, reasons, err := k.pinnable(ctx, "bindingConditions", spec.DeviceClass, spec.Selector, func(d device) (bool, string) {
		return len(d.dev.BindingConditions) > 0, ""
	})
	if err != nil || expr != "" {
		return d, node, expr, err
	}
	// Nothing to check it on: not verified (skipCheck), not a broken rule.
	return device{}, "", "", skipCheck{fmt.Sprintf("no free device of class %s%s publishes binding conditions%s",
		spec.DeviceClass, selectorWords(spec.Selector), strings.Join(append([]string{""}, reasons...), "; "))}
}
