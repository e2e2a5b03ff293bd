package cluster

import (
	"context"
	"fmt"
	"strings"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dralab/dralab/drivers/conformance/devices"
	"github.com/dralab/dralab/drivers/conformance/manifest"
)

// A proof binds a container to its allocation. A value that merely matches
// the proof's pattern shows only that the driver injected something: a
// driver that gives every container gpu-0 would pass. So every proof is
// checked against what the pod's claims were allocated: the value must be
// the one the manifest's proof names for one of those devices (when it
// names one), and within a feature distinct devices must prove distinct
// values and one device, held through one claim or as shares of it, the
// same value.

// podDevice is a device allocated to one of a pod's claims.
type podDevice struct {
	claim string
	r     resourceapi.DeviceRequestAllocationResult
}

func (d podDevice) key() devices.Key {
	return devices.Key{Driver: d.r.Driver, Pool: d.r.Pool, Device: d.r.Device}
}

// provenDevice is a value a pod proved, and the device it was bound to.
type provenDevice struct {
	pod   string
	value string
	podDevice
}

// podDevices lists the devices allocated to a pod's claims: those it names,
// those made from its templates and the one the scheduler made for its
// extended resources.
func (k *kit) podDevices(ctx context.Context, pod *v1.Pod) ([]podDevice, error) {
	var names []string
	for _, pc := range pod.Spec.ResourceClaims {
		switch {
		case pc.ResourceClaimName != nil:
			names = append(names, *pc.ResourceClaimName)
		default:
			for _, st := range pod.Status.ResourceClaimStatuses {
				if st.Name == pc.Name && st.ResourceClaimName != nil {
					names = append(names, *st.ResourceClaimName)
				}
			}
		}
	}
	if st := pod.Status.ExtendedResourceClaimStatus; st != nil && st.ResourceClaimName != "" {
		names = append(names, st.ResourceClaimName)
	}
	var out []podDevice
	for _, name := range names {
		c, err := k.client.ResourceV1().ResourceClaims(k.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("claim %s of pod %s: %w", name, pod.Name, err)
		}
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == k.m.Driver {
				out = append(out, podDevice{claim: name, r: r})
			}
		}
	}
	return out, nil
}

// bindProof checks the value v a running pod proved against the devices
// its claims were allocated, and remembers it for the pods after it.
func (k *kit) bindProof(ctx context.Context, podName string, p manifest.Proof, v string) error {
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	allocated, err := k.podDevices(ctx, pod)
	if err != nil {
		return err
	}
	if len(allocated) == 0 {
		return fmt.Errorf("pod %s proves %q, but none of its claims was allocated a device of %s", podName, v, k.m.Driver)
	}
	var bound *podDevice
	switch {
	case p.Names != "":
		st, err := devices.Read(ctx, k.client, k.m.Driver)
		if err != nil {
			return err
		}
		published := map[devices.Key]devices.Device{}
		for _, d := range st.Published(k.m.Driver, "") {
			published[d.Key()] = d
		}
		var wants []string
		for i, a := range allocated {
			d, ok := published[a.key()]
			if !ok {
				return fmt.Errorf("pod %s, claim %s: device %s is allocated but not published", podName, a.claim, a.key())
			}
			want, err := p.Expected(a.r.Driver, a.r.Pool, d.Device)
			if err != nil {
				return fmt.Errorf("pod %s, claim %s: the manifest's proof names %q: %w", podName, a.claim, p.Names, err)
			}
			if want == v {
				bound = &allocated[i]
				break
			}
			wants = append(wants, fmt.Sprintf("%q for %s (claim %s)", want, a.key(), a.claim))
		}
		if bound == nil {
			return fmt.Errorf("pod %s proves %q, which names none of the devices its claims were allocated: the manifest's proof (names: %s) wants %s", podName, v, p.Names, strings.Join(wants, " or "))
		}
	case len(allocated) == 1:
		bound = &allocated[0]
	default:
		// Several devices and no template to tell which one v names.
		return nil
	}
	kept := k.proven[:0]
	for _, q := range k.proven {
		// One device held at once through one claim, or as shares, must
		// prove one value; a device allocated again after its holder
		// ended may be given anew (a MIG device is created again, with
		// a new UUID).
		concurrent := q.claim == bound.claim || q.r.ShareID != nil && bound.r.ShareID != nil
		if q.key() == bound.key() && !concurrent {
			continue
		}
		kept = append(kept, q)
		switch {
		case q.key() == bound.key() && q.value != v:
			return fmt.Errorf("pods %s and %s were allocated the same device %s (claims %s and %s), but prove different values, %q and %q: the proof does not name the device",
				q.pod, podName, bound.key(), q.claim, bound.claim, q.value, v)
		case q.key() != bound.key() && q.value == v:
			return fmt.Errorf("pods %s and %s prove the same value %q, but were allocated different devices, %s (claim %s) and %s (claim %s): the proof does not tell devices apart",
				q.pod, podName, v, q.key(), q.claim, bound.key(), bound.claim)
		}
	}
	k.proven = append(kept, provenDevice{pod: podName, value: v, podDevice: *bound})
	return nil
}
