package manifest

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ProofPod is what the suite's pods need of the cluster to run on the
// driver's nodes, beside their claims: where GPU nodes carry a taint (as
// cloud GPU node pools do), where nodes are picked by a label, where
// images come from a private registry or the runtime is not the default.
type ProofPod struct {
	// Tolerations are added to every pod the suite creates.
	Tolerations []v1.Toleration `json:"tolerations,omitempty"`
	// NodeSelector is every pod's node selector.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// ImagePullSecrets are the secrets, in the suite's namespaces, that
	// pull the proof image. The suite creates its namespaces: a secret
	// must be copied there by the caller's admission or controllers.
	ImagePullSecrets []v1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// RuntimeClassName is every pod's runtime class.
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
	// PriorityClassName is every pod's priority class.
	PriorityClassName string `json:"priorityClassName,omitempty"`
}

// Apply sets what p says on pod spec s, the tolerations added to those s
// has.
func (p *ProofPod) Apply(s *v1.PodSpec) {
	if p == nil {
		return
	}
	s.Tolerations = append(s.Tolerations, p.Tolerations...)
	if len(p.NodeSelector) > 0 {
		if s.NodeSelector == nil {
			s.NodeSelector = map[string]string{}
		}
		for k, v := range p.NodeSelector {
			s.NodeSelector[k] = v
		}
	}
	s.ImagePullSecrets = append(s.ImagePullSecrets, p.ImagePullSecrets...)
	if p.RuntimeClassName != "" {
		s.RuntimeClassName = &p.RuntimeClassName
	}
	if p.PriorityClassName != "" {
		s.PriorityClassName = p.PriorityClassName
	}
}

func (p *ProofPod) validate(fp *field.Path) field.ErrorList {
	if p == nil {
		return nil
	}
	var errs field.ErrorList
	for i, t := range p.Tolerations {
		errs = append(errs, ValidateToleration(t, fp.Child("tolerations").Index(i))...)
	}
	for k, v := range p.NodeSelector {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, field.Invalid(fp.Child("nodeSelector"), k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, field.Invalid(fp.Child("nodeSelector").Key(k), v, msg))
		}
	}
	for i, s := range p.ImagePullSecrets {
		for _, msg := range validation.IsDNS1123Subdomain(s.Name) {
			errs = append(errs, field.Invalid(fp.Child("imagePullSecrets").Index(i).Child("name"), s.Name, msg))
		}
	}
	for _, n := range []struct {
		name, value string
	}{{"runtimeClassName", p.RuntimeClassName}, {"priorityClassName", p.PriorityClassName}} {
		if n.value == "" {
			continue
		}
		for _, msg := range validation.IsDNS1123Subdomain(n.value) {
			errs = append(errs, field.Invalid(fp.Child(n.name), n.value, msg))
		}
	}
	return errs
}

// effects are the taint effects a toleration may name.
var effects = []v1.TaintEffect{v1.TaintEffectNoSchedule, v1.TaintEffectPreferNoSchedule, v1.TaintEffectNoExecute}

// ValidateToleration checks a toleration as the API server does: a key
// that is a qualified name (empty only with Exists, tolerating every
// taint), Equal or Exists, no value with Exists, a value that is a label
// value, a known effect or none (every effect).
func ValidateToleration(t v1.Toleration, p *field.Path) field.ErrorList {
	var errs field.ErrorList
	if t.Key == "" {
		if t.Operator != v1.TolerationOpExists {
			errs = append(errs, field.Invalid(p.Child("operator"), t.Operator, "an empty key tolerates every taint, with operator Exists only"))
		}
	} else {
		for _, msg := range validation.IsQualifiedName(t.Key) {
			errs = append(errs, field.Invalid(p.Child("key"), t.Key, msg))
		}
	}
	switch t.Operator {
	case v1.TolerationOpEqual, "":
		for _, msg := range validation.IsValidLabelValue(t.Value) {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, msg))
		}
	case v1.TolerationOpExists:
		if t.Value != "" {
			errs = append(errs, field.Invalid(p.Child("value"), t.Value, "operator Exists takes no value"))
		}
	default:
		errs = append(errs, field.NotSupported(p.Child("operator"), t.Operator, []string{string(v1.TolerationOpEqual), string(v1.TolerationOpExists)}))
	}
	if t.Effect != "" && !slices.Contains(effects, t.Effect) {
		errs = append(errs, field.NotSupported(p.Child("effect"), t.Effect, effects))
	}
	if t.TolerationSeconds != nil && t.Effect != v1.TaintEffectNoExecute {
		errs = append(errs, field.Invalid(p.Child("tolerationSeconds"), *t.TolerationSeconds, "only a NoExecute toleration has seconds"))
	}
	return errs
}

// ParseToleration reads a toleration in the syntax of kubectl's taints:
// KEY=VALUE:EFFECT tolerates that taint; KEY:EFFECT every taint of the key
// with that effect, whatever its value; KEY=VALUE that value with any
// effect; KEY alone every taint of the key.
func ParseToleration(s string) (v1.Toleration, error) {
	spec, effect, hasEffect := strings.Cut(s, ":")
	key, value, hasValue := strings.Cut(spec, "=")
	t := v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: v1.TaintEffect(effect)}
	if hasValue {
		t.Operator, t.Value = v1.TolerationOpEqual, value
	}
	if hasEffect && effect == "" {
		return t, fmt.Errorf("toleration %q: an effect after the colon (%s)", s, effectWords())
	}
	if key == "" {
		return t, fmt.Errorf("toleration %q: a key, as in KEY=VALUE:EFFECT", s)
	}
	if errs := ValidateToleration(t, field.NewPath("toleration")); len(errs) > 0 {
		return t, fmt.Errorf("toleration %q: %w", s, errs.ToAggregate())
	}
	return t, nil
}

func effectWords() string {
	var out []string
	for _, e := range effects {
		out = append(out, string(e))
	}
	return strings.Join(out, ", ")
}
