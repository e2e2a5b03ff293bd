package strictyaml_test

import (
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
	"github.com/dralab/dralab/drivers/conformance/strictyaml"
)

// FuzzDecode: any YAML document either fails or decodes to a value that,
// encoded again, decodes to the same value. The decoders of dralab's
// files each have a target of their own; this one is the YAML layer under
// them all, with no type to restrict what the fuzzer reaches.
func FuzzDecode(f *testing.F) {
	fuzzcheck.AddFiles(f, "../manifest/testdata/*.yaml", "../../*/driver.yaml", "../../fakegpu/profiles/*.yaml")
	fuzzcheck.AddStrings(f,
		"",
		"# only a comment\n",
		"a: 1\na: 2\n",
		"a: &x [1, 2]\nb: *x\n",
		"? [a, b]\n: c\n",
		"a: !!binary aGVsbG8=\n",
		"a: 1.0\nb: .inf\nc: 0o17\nd: 18446744073709551616\n",
	)
	decode := func(data []byte) (any, error) {
		var v any
		err := strictyaml.Decode(data, &v)
		return v, err
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var v any
		var err error
		fuzzcheck.Promptly(func() { v, err = decode(data) })
		if err != nil {
			return // no file to name: the callers prefix theirs
		}
		again, err := yaml.Marshal(v)
		if err != nil {
			t.Fatalf("a decoded document does not encode: %v", err)
		}
		fuzzcheck.Same(t, v, again, decode)
	})
}
