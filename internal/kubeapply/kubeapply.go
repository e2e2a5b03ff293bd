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
}

// Apply creates obj, in namespace if it is namespaced, and reports whether
// it is cluster-scoped.
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
	if apierrors.IsAlreadyExists(err) {
		_, err = res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: a.FieldManager, Force: true})
	}
	return clusterScoped, err
}
