package scenarios

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/dralab/dralab/internal/kubeapply"
)

// Manifests are the files the scenario's steps apply or create objects
// from, each once, in the order the steps first name them.
func (s *Scenario) Manifests() []string {
	var out []string
	add := func(files ...string) {
		for _, f := range files {
			if f != "" && !slices.Contains(out, f) {
				out = append(out, f)
			}
		}
	}
	for _, st := range s.Steps {
		add(st.Apply...)
		if c := st.CreatePods; c != nil {
			add(c.Files()...)
			add(c.Group)
		}
	}
	return out
}

// checkManifests decodes every manifest a step names when the scenario
// is loaded, so that a file that does not decode, or an object that could
// not do what its author meant, is an error before anything is applied.
func (s *Scenario) checkManifests() error {
	for _, f := range s.Manifests() {
		data, err := s.File(f)
		if err != nil {
			return fmt.Errorf("%w %w", ErrInvalid, err)
		}
		objs, err := kubeapply.Decode(s.Source(f), data)
		if err != nil {
			return fmt.Errorf("%w %w", ErrInvalid, err)
		}
		for i, obj := range objs {
			if err := checkObject(obj); err != nil {
				return fmt.Errorf("%w %s: object %d (%s %s): %w", ErrInvalid, s.Source(f), i, obj.GetKind(), obj.GetName(), err)
			}
		}
	}
	return nil
}

// checkObject refuses what the API server takes but that does nothing:
// a DeviceTaintRule without spec.deviceSelector taints no device in
// Kubernetes 1.37 (its allocator, eviction controller and slice tracker
// skip such a rule) and in 1.38 by the API's word; an empty selector, {},
// selects every device.
func checkObject(obj *unstructured.Unstructured) error {
	gvk := obj.GroupVersionKind()
	if gvk.Group != "resource.k8s.io" || gvk.Kind != "DeviceTaintRule" {
		return nil
	}
	sel, found, _ := unstructured.NestedFieldNoCopy(obj.Object, "spec", "deviceSelector")
	if !found || sel == nil {
		return fmt.Errorf("spec.deviceSelector is absent: a DeviceTaintRule without one taints no device (Kubernetes 1.37 and 1.38); write deviceSelector: {} to taint every device, or name the driver, pool or device")
	}
	return nil
}
