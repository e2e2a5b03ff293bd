package config

import (
	"testing"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
)

// FuzzParse: a lab configuration either fails naming its file (and, when
// it decodes, the fields that do not validate) or parses to a Config that
// a lab records and reads back as the same Config.
func FuzzParse(f *testing.F) {
	fuzzcheck.AddFiles(f, "../examples/*.yaml")
	fuzzcheck.AddStrings(f,
		"",
		"# only a comment\n",
		"apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a}]\n",
		"apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a, labels: {}, gpus: {profile: l4-24gb, count: 1}}]\n",
		"apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a}]\ndriver: {name: gpu.example.com, command: ['./plugin', '{port:metrics}'], env: {A: '{nodeName}'}}\n",
		"apiVersion: lab.dralab.dev/v1alpha1\nkind: Lab\nnodes: [{name: a, gpus: {profile: h100-80gb, count: 2, attach: fabric, attachDelay: 1h}}]\n",
		"nodes: [{name: a, name: b}]\n",
	)
	const source = "fuzz.yaml"
	parse := func(data []byte) (*Config, error) { return Parse(source, data) }
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzcheck.YAMLDocument[Config](t, data, source, parse)
	})
}
