package scenarios

import (
	"path/filepath"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
)

// FuzzParse: a scenario.yaml either fails naming its file (and, when it
// decodes, the fields that do not validate) or parses to a Scenario that
// encodes and parses back to itself.
func FuzzParse(f *testing.F) {
	fuzzcheck.AddFiles(f, "*/scenario.yaml")
	fuzzcheck.AddStrings(f,
		"",
		"# only a comment\n",
		"name: x\nsteps: [{apply: pods.yaml}]\n",
		"name: x\nexpect: {allocated: {count: {devicesOf: [h100], plus: -1}}}\n",
		"name: x\nexpect: {allocated: {count: {sharesOf: {tier: l4, memory: 1.5Gi}}}}\n",
	)
	// The files every scenario folder has between them: what references
	// may name.
	var files []string
	all, err := filepath.Glob("*/*")
	if err != nil {
		f.Fatal(err)
	}
	for _, p := range all {
		files = append(files, filepath.Base(p))
	}
	const source = "scenarios/fuzz/scenario.yaml"
	parse := func(data []byte) (*Scenario, error) { return Parse(source, data, files) }
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzcheck.YAMLDocument[Scenario](t, data, source, parse)
	})
}
