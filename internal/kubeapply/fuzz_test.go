package kubeapply

import (
	"bytes"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
)

// FuzzDecode: a manifest either fails naming its file or splits into
// objects that, written back as one multi-document manifest, split into
// the same objects.
func FuzzDecode(f *testing.F) {
	fuzzcheck.AddFiles(f, "../../scenarios/*/*.yaml", "../../drivers/conformance/manifest/testdata/*.yaml")
	fuzzcheck.AddStrings(f,
		"",
		"---\n---\n",
		"a: 1\n---\nb: [1, 2.5, true, null]\n",
		`{"kind": "Pod"} {"kind": "Node"}`,
		"[1, 2]\n",
		"a: 1.0\nb: 1e3\nc: 0x10\nd: 9223372036854775808\n",
		"a: &x 1\nb: *x\n",
	)
	const source = "scenarios/fuzz/pods.yaml"
	parse := func(data []byte) ([]*unstructured.Unstructured, error) { return Decode(source, data) }
	f.Fuzz(func(t *testing.T, data []byte) {
		var objs []*unstructured.Unstructured
		var err error
		fuzzcheck.Promptly(func() { objs, err = parse(data) })
		if err != nil {
			fuzzcheck.NamesSource(t, err, source)
			return
		}
		var again bytes.Buffer
		for _, o := range objs {
			doc, err := yaml.Marshal(o.Object)
			if err != nil {
				t.Fatalf("a decoded object does not encode: %v", err)
			}
			again.WriteString("---\n")
			again.Write(doc)
		}
		fuzzcheck.Same(t, objs, again.Bytes(), parse)
	})
}
