package config

import (
	"slices"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Taint is a node's taint, as its kubelet registers it (Node.Taints).
type Taint struct {
	Key    string         `json:"key"`
	Value  string         `json:"value,omitempty"`
	Effect v1.TaintEffect `json:"effect"`
}

// String is the taint as kubectl and the kubelet's --register-with-taints
// write it: key=value:Effect, or key:Effect without a value.
func (t Taint) String() string {
	if t.Value == "" {
		return t.Key + ":" + string(t.Effect)
	}
	return t.Key + "=" + t.Value + ":" + string(t.Effect)
}

// Taint is the API's taint.
func (t Taint) Taint() v1.Taint {
	return v1.Taint{Key: t.Key, Value: t.Value, Effect: t.Effect}
}

// TaintStrings are node n's taints as the kubelet's flag takes them.
func (n *Node) TaintStrings() []string {
	var out []string
	for _, t := range n.Taints {
		out = append(out, t.String())
	}
	return out
}

// NodeTaints are node n's taints, as the API has them.
func (n *Node) NodeTaints() []v1.Taint {
	var out []v1.Taint
	for _, t := range n.Taints {
		out = append(out, t.Taint())
	}
	return out
}

// taintEffects are the effects a node's taint may have.
var taintEffects = []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute}

// validateTaints checks a node's taints as the API server checks a
// node's: a qualified key, a label value, a known effect, one taint of a
// key and effect.
func validateTaints(taints []Taint, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	type keyEffect struct {
		key    string
		effect v1.TaintEffect
	}
	seen := map[keyEffect]bool{}
	for i, t := range taints {
		tp := p.Index(i)
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(tp.Child("key"), t.Key, msg))
		}
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(tp.Child("value"), t.Value, msg))
		}
		if !slices.Contains(taintEffects, t.Effect) {
			errs = append(errs, field.NotSupported(tp.Child("effect"), t.Effect, taintEffects))
		}
		if k := (keyEffect{t.Key, t.Effect}); seen[k] {
			errs = append(errs, field.Duplicate(tp, t.String()))
		} else {
			seen[k] = true
		}
	}
	return errs
}
