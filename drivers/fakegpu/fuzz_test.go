package fakegpu

import (
	"testing"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
)

// FuzzParseProfile: a GPU profile either fails naming its file (and, when
// it decodes, the fields that do not validate) or parses to a Profile that
// encodes and parses back to itself.
func FuzzParseProfile(f *testing.F) {
	fuzzcheck.AddFiles(f, "profiles/*.yaml")
	fuzzcheck.AddStrings(f,
		"",
		"# only a comment\n",
		"memory: 0\n",
		"memory: -1Gi\nmig: {}\n",
		"memory: 1.5Gi\ndriverVersion: 550.54.15\ncudaComputeCapability: '9.0'\n",
	)
	const source = "profiles/fuzz.yaml"
	parse := func(data []byte) (*Profile, error) { return ParseProfile(source, data) }
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzcheck.YAMLDocument[Profile](t, data, source, parse)
	})
}
