package manifest

import (
	"testing"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
)

// FuzzParse: a driver manifest either fails naming its file (and, when it
// decodes, the fields that do not validate) or parses to a Manifest, its
// defaults applied, that encodes and parses back to itself.
func FuzzParse(f *testing.F) {
	fuzzcheck.AddFiles(f, "testdata/*.yaml", "../../*/driver.yaml")
	fuzzcheck.AddStrings(f,
		"",
		"# only a comment\n",
		"apiVersion: conformance.dralab.dev/v1alpha1\nkind: DriverManifest\ndriver: gpu.example.com\ndeviceClass: gpu\nproof: {env: {name: GPU, pattern: '.*'}}\ntimeouts: {podRunning: 1.5m, prepare: 0s}\n",
		"apiVersion: conformance.dralab.dev/v1alpha1\nkind: DriverManifest\ndriver: gpu.example.com\ndeviceClass: gpu\nproof: {command: {args: [ls], pattern: '('}}\ncapabilities: {OpaqueConfig: true}\nopaqueConfig: {valid: {a: 1}, invalid: [1, 2]}\n",
		"timeouts: {podRunning: -1s}\nsanity: {restartable: false}\n",
	)
	const source = "drivers/fuzz/driver.yaml"
	parse := func(data []byte) (*Manifest, error) { return Parse(source, data) }
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzcheck.YAMLDocument[document](t, data, source, parse)
	})
}
