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
	"maps"
	"slices"
	"strings"

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
	// RefuseDropped makes Apply fail with a *DroppedError when the API
	// server took the object without some of its fields.
	RefuseDropped bool
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
	var got *unstructured.Unstructured
	got, err = res.Create(ctx, obj, metav1.CreateOptions{FieldManager: a.FieldManager, FieldValidation: "Strict"})
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
		got, err = res.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: a.FieldManager, Force: true})
	}
	if err == nil && a.RefuseDropped {
		if paths := Dropped(obj, got); len(paths) > 0 {
			return clusterScoped, &DroppedError{Kind: obj.GetKind(), Name: obj.GetName(), Paths: paths}
		}
	}
	return clusterScoped, err
}

// DroppedError is an object the API server took without some of its
// fields: a field whose feature gate is off is dropped, not refused.
type DroppedError struct {
	Kind, Name string
	// Paths are the dropped fields, as spec.devices.requests[0].exactly.derivedAttributes.
	Paths []string
}

func (e *DroppedError) Error() string {
	return fmt.Sprintf("the API server dropped %s of %s %s: the feature gate that field needs is off on this cluster", strings.Join(e.Paths, ", "), e.Kind, e.Name)
}

// Dropped lists the fields of sent, outside metadata and status, that got
// (what the API server returned) lacks. A field sent empty (false, 0, "",
// an empty list or map) is not looked for: the server omits those.
func Dropped(sent, got *unstructured.Unstructured) []string {
	if got == nil {
		return nil
	}
	var out []string
	var walk func(path string, s, g any)
	walk = func(path string, s, g any) {
		switch sv := s.(type) {
		case map[string]any:
			gv, _ := g.(map[string]any)
			for _, k := range slices.Sorted(maps.Keys(sv)) {
				p := k
				if path != "" {
					p = path + "." + k
				}
				if path == "" && (k == "metadata" || k == "status" || k == "apiVersion" || k == "kind") {
					continue
				}
				gk, ok := gv[k]
				if !ok {
					if !empty(sv[k]) {
						out = append(out, p)
					}
					continue
				}
				walk(p, sv[k], gk)
			}
		case []any:
			gv, _ := g.([]any)
			for i := range min(len(sv), len(gv)) {
				walk(fmt.Sprintf("%s[%d]", path, i), sv[i], gv[i])
			}
		}
	}
	walk("", sent.Object, got.Object)
	return out
}

// empty tells a value a server omits: false, 0, "", or an empty list or
// map.
func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case int64:
		return x == 0
	case float64:
		return x == 0
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}
