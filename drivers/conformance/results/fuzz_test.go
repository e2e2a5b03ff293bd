package results

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
)

// FuzzParse: a go test -json stream either fails naming the line of its
// broken event or gives a report that writes as a JUnit document which
// reads back with the report's cases and counts. A report is made of the
// stream, not a copy of it, so the round trip is of the document.
func FuzzParse(f *testing.F) {
	fuzzcheck.AddFiles(f, "testdata/*.json")
	fuzzcheck.AddStrings(f,
		"",
		"not json\n# example.com/pkg\n./x.go:1:1: syntax error\n",
		`{"Action":"run","Package":"p","Test":"TestA"}`+"\n"+`{"Action":"output","Package":"p","Test":"TestA","Output":"\u001b[31mred\n"}`+"\n"+`{"Action":"fail","Package":"p","Test":"TestA","Elapsed":-1}`,
		`{"Action":"pass","Package":"p","Test":"TestA/sub"}`+"\n"+`{"Action":"skip","Package":"p","Test":"TestA"}`,
		`{"Action":"build-output","ImportPath":"p [p.test]","Output":"x"}`+"\n"+`{"Action":"fail","Package":"p","FailedBuild":"p [p.test]"}`,
		`{"Action":`,
	)
	f.Fuzz(func(t *testing.T, data []byte) {
		var rep *Report
		var err error
		fuzzcheck.Promptly(func() { rep, err = Parse(bytes.NewReader(data)) })
		if err != nil {
			fuzzcheck.NamesSource(t, err, "go test -json output line ")
			return
		}
		var out bytes.Buffer
		if err := rep.WriteXML(&out, "fuzz"); err != nil {
			t.Fatalf("a report does not write: %v", err)
		}
		var doc junitSuites
		if err := xml.Unmarshal(out.Bytes(), &doc); err != nil {
			t.Fatalf("the JUnit document does not read back: %v\n%s", err, out.Bytes())
		}
		tests, failures, skipped := rep.counts()
		if len(doc.Suites) != 1 || len(doc.Suites[0].Cases) != len(rep.Cases) || doc.Tests != tests || doc.Failures != failures || doc.Skipped != skipped {
			t.Fatalf("the JUnit document reads back as %d suites, %+v; the report has %d cases (%d tests, %d failed, %d skipped)",
				len(doc.Suites), doc, len(rep.Cases), tests, failures, skipped)
		}
		for i, c := range doc.Suites[0].Cases {
			if (c.Failure != nil) != (rep.Cases[i].Status == Failed) || (c.Skipped != nil) != (rep.Cases[i].Status == Skipped) {
				t.Fatalf("case %d reads back as %+v, was %s", i, c, rep.Cases[i].Status)
			}
		}
		if s, want := rep.Summary(), fmt.Sprintf("%d checks: %d passed, %d failed, %d skipped\n", tests, tests-failures-skipped, failures, skipped); !strings.HasSuffix(s, want) {
			t.Fatalf("summary does not end with its totals %q: %q", want, s)
		}
	})
}
