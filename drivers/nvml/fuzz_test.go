package nvml

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/fuzzcheck"
)

// FuzzParseSource: a --nvml source either is ErrUnknownSource quoting it
// or parses to a Source whose spelling parses back to the same Source.
func FuzzParseSource(f *testing.F) {
	// The sources the lab examples name (mock:dgxh100), and every one
	// the driver accepts.
	files, err := filepath.Glob("../../lab/examples/*.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no lab examples: %v", err)
	}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for _, m := range regexp.MustCompile(`mock:[a-z0-9-]+`).FindAll(data, -1) {
			f.Add(m)
		}
	}
	fuzzcheck.AddStrings(f, Sources()...)
	fuzzcheck.AddStrings(f, "", "host", "mock:", "mock:dgxa100 ", "MOCK:dgxh100", "mock:mock:mixed", "nvml\\x00")
	parse := func(data []byte) (Source, error) { return ParseSource(string(data)) }
	f.Fuzz(func(t *testing.T, data []byte) {
		var s Source
		var err error
		fuzzcheck.Promptly(func() { s, err = parse(data) })
		if err != nil {
			fuzzcheck.NamesSource(t, err, fmt.Sprintf("%q", data))
			if !errors.Is(err, ErrUnknownSource) {
				t.Fatalf("not ErrUnknownSource: %v", err)
			}
			return
		}
		fuzzcheck.Same(t, s, []byte(s.String()), parse)
	})
}
