// Package kubeapply decodes multi-document YAML manifests and applies their
// objects the way dralab applies everything it is handed (scenario
// manifests, an outside driver's manifests): created with strict field
// validation, so that a misspelt field is an error naming it, and applied
// over an object left from an interrupted run.
package kubeapply

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
)

// Decode splits a manifest into its objects; source names it in errors.
func Decode(source string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var obj map[string]any
		if err := dec.Decode(&obj); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		if obj == nil {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
}

// Applier applies objects through the dynamic client.
type Applier struct {
	Dynamic      dynamic.Interface
	Mapper       meta.RESTMapper
	FieldManager string
	// Owned, when set, says whether a cluster-scoped object that already
	// exists is the applier's own (left by an interrupted run): only then
	// is it applied over; any other is left as it is, and Apply fails
	// with ErrNotOwned.
	Owned func(existing *unstructured.Unstructured) bool
}

// ErrNotOwned means a cluster-scoped object of the same name already
// exists and is not the applier's.
var ErrNotOwned = errors.New("already exists and was not created by dralab: it is left as it is")

// Apply creates obj, in namespace if it is namespaced, and reports whether
// it is cluster-scoped. An object that already exists is applied over
// (forced), unless it is cluster-scoped and Owned says it is not the
// applier's.
func (a *Applier) Apply(ctx context.Context, obj *unstructured.Unstructured, namespace string) (clusterScoped bool, err error) {
	gvk := obj.GroupVersionKind()
	mapping, err := a.Mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return false, err
	}
	var res dynamic.ResourceInterface = a.Dynamic.Resource(mapping.Resource)
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		obj.SetNamespace(namespace)
		res = a.Dynamic.Resource(mapping.Resource).Namespace(namespace)
	} else {
		clusterScoped = true
	}
	_, err = res.Create(ctx, obj, metav1.CreateOptions{FieldManager: a.FieldManager, FieldValidation: "Strict"})
	if apierrors.IsAlreadyExists(err) && clusterScoped && a.Owned != nil {
		existing, gerr := res.Get(ctx, obj.GetName(), metav1.GetOptions{})
		if gerr != nil {
			return clusterScoped, gerr
		}
		if !a.Owned(existing) {
			return clusterScoped, fmt.Errorf("%s %s %w", obj.GetKind(), obj.GetName(), ErrNotOwned)
		}
	}
	if apierrors.IsAlreadyExists(err) {
		_, err = res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: a.FieldManager, Force: true})
	}
	return clusterScoped, err
}
