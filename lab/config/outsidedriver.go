package config

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Driver is an outside DRA driver's kubelet plugin, run by the lab on every
// node as a host process, restarted when it exits.
type Driver struct {
	// Name is the DRA driver's name.
	Name string `json:"name"`
	// Command is the plugin's command line. Its words may contain the
	// placeholders of Placeholders, filled in per node.
	Command []string `json:"command"`
	// Env is added to the lab's environment for the plugin. Its values
	// may contain the same placeholders as Command.
	Env map[string]string `json:"env,omitempty"`
	// Manifests are YAML files (relative to the configuration file) the lab
	// applies once the control plane is up, e.g. the driver's DeviceClasses.
	Manifests []string `json:"manifests,omitempty"`
}

// Placeholders are what a driver command may contain, and what each becomes
// on a node.
var Placeholders = map[string]string{
	"{nodeName}":     "the node's name",
	"{kubeconfig}":   "a kubeconfig with the node's credentials (the Node authorizer lets it write its own slices)",
	"{registrarDir}": "the kubelet's plugin registration directory",
	"{pluginDir}":    "the driver's own directory under the kubelet's plugins directory, for its DRA socket",
	"{pluginsDir}":   "the kubelet's plugins directory, the parent of {pluginDir}",
	"{cdiDir}":       "the CDI spec directory the node's runtime reads",
	"{stateDir}":     "a directory that survives the plugin's restarts, for its checkpoint",
	"{port:<name>}":  "a free loopback port of that name, one per node: nodes share the host's network namespace, so fixed ports (metrics, health) would collide",
}

// placeholder finds {word} and {port:name} in s.
var placeholder = regexp.MustCompile(`\{[A-Za-z]+(:[a-z0-9-]+)?\}`)

// portPrefix starts a port placeholder, "{port:metrics}".
const portPrefix = "{port:"

// known tells whether ph is a placeholder the lab fills.
func known(ph string) bool {
	if strings.HasPrefix(ph, portPrefix) {
		return true
	}
	_, ok := Placeholders[ph]
	return ok && ph != "{port:<name>}"
}

func (d *Driver) validate(dp *field.Path) field.ErrorList {
	var errs field.ErrorList
	if msgs := validation.IsDNS1123Subdomain(d.Name); len(msgs) > 0 || !strings.Contains(d.Name, ".") {
		errs = append(errs, field.Invalid(dp.Child("name"), d.Name, "must be a DNS subdomain with at least one dot, the driver's name"))
	}
	if len(d.Command) == 0 || d.Command[0] == "" {
		errs = append(errs, field.Required(dp.Child("command"), "the kubelet plugin's command line, e.g. [/usr/local/bin/my-plugin, --node-name={nodeName}]"))
	}
	for i, word := range d.Command {
		errs = append(errs, checkPlaceholders(dp.Child("command").Index(i), word)...)
	}
	for _, k := range slices.Sorted(maps.Keys(d.Env)) {
		errs = append(errs, checkPlaceholders(dp.Child("env").Key(k), d.Env[k])...)
	}
	for i, m := range d.Manifests {
		if !filepath.IsAbs(m) {
			errs = append(errs, field.Invalid(dp.Child("manifests").Index(i), m, "must be absolute once loaded (relative paths are resolved against the configuration file)"))
		} else if _, err := os.Stat(m); err != nil {
			errs = append(errs, field.Invalid(dp.Child("manifests").Index(i), m, err.Error()))
		}
	}
	return errs
}

// checkPlaceholders refuses a word's unknown placeholders, and anything
// that looks like one but is not ("{port:}", "{Port:x}").
func checkPlaceholders(p *field.Path, word string) field.ErrorList {
	var errs field.ErrorList
	for _, ph := range placeholder.FindAllString(word, -1) {
		if !known(ph) {
			errs = append(errs, field.NotSupported(p, ph, slices.Sorted(maps.Keys(Placeholders))))
		}
	}
	if rest := placeholder.ReplaceAllString(word, ""); strings.Contains(rest, portPrefix) {
		errs = append(errs, field.Invalid(p, word, "a port placeholder is {port:<name>}, the name in lower case letters, digits and dashes"))
	}
	return errs
}

// PortNames lists the names of the {port:<name>} placeholders of the
// driver's command and environment.
func (d *Driver) PortNames() []string {
	names := map[string]bool{}
	for _, word := range append(slices.Clone(d.Command), slices.Collect(maps.Values(d.Env))...) {
		for _, ph := range placeholder.FindAllString(word, -1) {
			if name, ok := strings.CutPrefix(ph, portPrefix); ok {
				names[strings.TrimSuffix(name, "}")] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(names))
}

// PortPlaceholder is the placeholder of a named port, for Expand's values.
func PortPlaceholder(name string) string { return portPrefix + name + "}" }

// Expand fills the placeholders of a driver's command and environment
// with a node's values.
func (d *Driver) Expand(values map[string]string) (command []string, env map[string]string) {
	fill := func(word string) string {
		return placeholder.ReplaceAllStringFunc(word, func(ph string) string {
			if v, ok := values[ph]; ok {
				return v
			}
			return ph
		})
	}
	command = make([]string, len(d.Command))
	for i, word := range d.Command {
		command[i] = fill(word)
	}
	env = make(map[string]string, len(d.Env))
	for k, v := range d.Env {
		env[k] = fill(v)
	}
	return command, env
}
