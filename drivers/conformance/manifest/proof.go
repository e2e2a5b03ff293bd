package manifest

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/dralab/dralab/drivers/conformance/devices"
)

// Proof is how a container shows that it got its device: exactly one of
// Env and Command is set.
type Proof struct {
	Env     *EnvProof     `json:"env,omitempty"`
	Command *CommandProof `json:"command,omitempty"`
	// Names is what the proven value must be for the device the claim
	// was allocated, a template of {driver}, {pool}, {device} and
	// {attribute:<name>} (the device's attribute, e.g. {attribute:uuid}):
	// "{device}" for a driver that sets GPU_DEVICE_0=gpu-3 for gpu-3.
	// Empty: the value must only match the pattern. Either way the suite
	// requires distinct devices to prove distinct values and one device
	// the same value wherever it is proven.
	Names string `json:"names,omitempty"`
}

// placeholder finds a template's placeholders.
var placeholder = regexp.MustCompile(`\{[^{}]*\}`)

// Expected is the value Names gives for a device of driver's pool: what a
// container given that device must prove. It fails on a placeholder whose
// attribute the device lacks.
func (p Proof) Expected(driver, pool string, dev resourceapi.Device) (string, error) {
	var errs []error
	out := placeholder.ReplaceAllStringFunc(p.Names, func(ph string) string {
		switch ph {
		case "{driver}":
			return driver
		case "{pool}":
			return pool
		case "{device}":
			return dev.Name
		}
		name, ok := strings.CutPrefix(strings.Trim(ph, "{}"), "attribute:")
		if !ok {
			errs = append(errs, fmt.Errorf("unknown placeholder %s", ph))
			return ph
		}
		v, ok := devices.Attribute(driver, dev.Attributes, name)
		if !ok {
			errs = append(errs, fmt.Errorf("device %s/%s/%s has no attribute %s", driver, pool, dev.Name, name))
		}
		return v
	})
	return out, errors.Join(errs...)
}

// EnvProof: the driver sets an environment variable in the container
// (through CDI) to a value that Pattern matches. The variable is named by
// exactly one of Name and NamePattern.
type EnvProof struct {
	// Name is the variable, e.g. GPU_DEVICE_0.
	Name string `json:"name,omitempty"`
	// NamePattern is a Go regular expression over variable names, for a
	// driver that names the variable after the device (GPU_DEVICE_3=gpu-3
	// for gpu-3): a fixed name would prove only while that one device is
	// free. The proof holds when any variable of the container whose
	// name it matches has a value Pattern matches. Anchor it to match
	// whole names.
	NamePattern string `json:"namePattern,omitempty"`
	// Pattern is a Go regular expression; anchor it to match the whole
	// value.
	Pattern string `json:"pattern"`
}

// CommandProof: Args, run in the container, print output that Pattern
// matches, e.g. nvidia-smi -L listing the device.
type CommandProof struct {
	Args []string `json:"args"`
	// Pattern is a Go regular expression matched against the command's
	// output.
	Pattern string `json:"pattern"`
}

func (pr *Proof) validate(p *field.Path) field.ErrorList {
	var errs field.ErrorList
	switch {
	case pr.Env == nil && pr.Command == nil:
		return field.ErrorList{field.Required(p, "set exactly one of env and command: how a container shows it got its device")}
	case pr.Env != nil && pr.Command != nil:
		errs = append(errs, field.Forbidden(p, "set exactly one of env and command, not both"))
	}
	if e := pr.Env; e != nil {
		ep := p.Child("env")
		switch {
		case e.Name == "" && e.NamePattern == "":
			errs = append(errs, field.Required(ep.Child("name"), "set exactly one of name, the environment variable the driver sets (e.g. GPU_DEVICE_0), and namePattern, a regular expression over variable names (e.g. ^GPU_DEVICE_[0-9]+$)"))
		case e.Name != "" && e.NamePattern != "":
			errs = append(errs, field.Forbidden(ep, "set exactly one of name and namePattern, not both"))
		case e.Name != "":
			for _, msg := range validation.IsEnvVarName(e.Name) {
				errs = append(errs, field.Invalid(ep.Child("name"), e.Name, msg))
			}
		default:
			if _, err := regexp.Compile(e.NamePattern); err != nil {
				errs = append(errs, field.Invalid(ep.Child("namePattern"), e.NamePattern, err.Error()))
			}
		}
		errs = append(errs, validatePattern(ep.Child("pattern"), e.Pattern)...)
	}
	if pr.Names != "" {
		phs := placeholder.FindAllString(pr.Names, -1)
		if len(phs) == 0 {
			errs = append(errs, field.Invalid(p.Child("names"), pr.Names, "name the device with {device}, {pool}, {driver} or {attribute:<name>}: a fixed value would be the same for every device"))
		}
		for _, ph := range phs {
			name, attr := strings.CutPrefix(strings.Trim(ph, "{}"), "attribute:")
			if !slices.Contains([]string{"{driver}", "{pool}", "{device}"}, ph) && (!attr || name == "") {
				errs = append(errs, field.NotSupported(p.Child("names"), ph, []string{"{driver}", "{pool}", "{device}", "{attribute:<name>}"}))
			}
		}
	}
	if c := pr.Command; c != nil {
		cp := p.Child("command")
		if len(c.Args) == 0 {
			errs = append(errs, field.Required(cp.Child("args"), "the command to run in the container, e.g. [nvidia-smi, -L]"))
		}
		errs = append(errs, validatePattern(cp.Child("pattern"), c.Pattern)...)
	}
	return errs
}

// validatePattern requires a pattern because an empty one matches
// anything, which would make the proof prove nothing.
func validatePattern(p *field.Path, pattern string) field.ErrorList {
	if pattern == "" {
		return field.ErrorList{field.Required(p, "a Go regular expression the value must match")}
	}
	if _, err := regexp.Compile(pattern); err != nil {
		return field.ErrorList{field.Invalid(p, pattern, err.Error())}
	}
	return nil
}

// Match finds the proof in a container's output (its log): the env
// variable's value (the container prints its environment) or the match of
// the command's pattern. It returns the proven value.
func (p Proof) Match(output string) (string, error) {
	switch {
	case p.Env != nil:
		return p.Env.match(output)
	case p.Command != nil:
		re, err := regexp.Compile(p.Command.Pattern)
		if err != nil {
			return "", err
		}
		if m := re.FindString(output); m != "" {
			return m, nil
		}
		return "", fmt.Errorf("the output of %v does not match %q", p.Command.Args, p.Command.Pattern)
	}
	return "", fmt.Errorf("the manifest names no proof")
}

// match finds the variable in a printed environment, one NAME=value a
// line: the first whose value matches, of the variables NamePattern
// matches, or the variable Name.
func (e *EnvProof) match(output string) (string, error) {
	re, err := regexp.Compile(e.Pattern)
	if err != nil {
		return "", err
	}
	named := func(name string) bool { return name == e.Name }
	if e.NamePattern != "" {
		nameRE, err := regexp.Compile(e.NamePattern)
		if err != nil {
			return "", err
		}
		named = nameRE.MatchString
	}
	var seen []string
	for _, line := range strings.Split(output, "\n") {
		name, v, ok := strings.Cut(strings.TrimRight(line, "\r"), "=")
		if !ok || !named(name) {
			continue
		}
		if re.MatchString(v) {
			return v, nil
		}
		seen = append(seen, fmt.Sprintf("%s=%q", name, v))
	}
	switch {
	case len(seen) > 0 && e.NamePattern == "":
		return "", fmt.Errorf("%s does not match %q", seen[0], e.Pattern)
	case len(seen) > 0:
		return "", fmt.Errorf("of the variables whose name matches %q, none has a value matching %q: %s", e.NamePattern, e.Pattern, strings.Join(seen, ", "))
	case e.NamePattern != "":
		return "", fmt.Errorf("the container's environment has no variable whose name matches %q", e.NamePattern)
	}
	return "", fmt.Errorf("the container's environment has no %s", e.Name)
}
