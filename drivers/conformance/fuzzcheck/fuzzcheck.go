// Package fuzzcheck holds what dralab's fuzz targets share: seeding a
// target from the repository's own files, and the properties every decoder
// of a user's or a file's bytes must have. A decoder either fails with an
// error naming the file (and, for a document that decodes but does not
// validate, the fields) or returns a value that, encoded again and decoded,
// is the same value.
package fuzzcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/api/resource"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/dralab/dralab/drivers/conformance/strictyaml"
)

// AddFiles adds every file the glob patterns match (relative to the test's
// package directory) to f's seed corpus, and fails f when they match none:
// a target whose seeds moved away would fuzz from nothing.
func AddFiles(f *testing.F, patterns ...string) {
	f.Helper()
	n := 0
	for _, pattern := range patterns {
		files, err := filepath.Glob(pattern)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			data, err := os.ReadFile(file)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(data)
			n++
		}
	}
	if n == 0 {
		f.Fatalf("no seed file matches %s", strings.Join(patterns, ", "))
	}
}

// AddStrings adds each of seeds to f's corpus as bytes.
func AddStrings(f *testing.F, seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
}

// MaxDecodeTime bounds how long one input may take to decode: a decoder
// that takes longer on a few kilobytes hangs whoever runs it.
const MaxDecodeTime = 5 * time.Second

// Promptly runs decode and crashes the test process when it has not
// returned within MaxDecodeTime. A crash, not a failure: a hung decoder
// never returns to report one, and the fuzzer keeps the input of a
// crashed run as a crasher.
func Promptly(decode func()) {
	timer := time.AfterFunc(MaxDecodeTime, func() {
		panic(fmt.Sprintf("decoding took more than %v", MaxDecodeTime))
	})
	defer timer.Stop()
	decode()
}

// NamesSource fails t unless err's message names source.
func NamesSource(t testing.TB, err error, source string) {
	t.Helper()
	if !strings.Contains(err.Error(), source) {
		t.Fatalf("error does not name %s: %v", source, err)
	}
}

// NamesFields fails t unless err is a validation error: it wraps a list of
// field errors, each naming the field it is about. Targets call it for
// input that decodes but does not validate.
func NamesFields(t testing.TB, err error) {
	t.Helper()
	var agg utilerrors.Aggregate
	if !errors.As(err, &agg) {
		t.Fatalf("a document that decodes fails without a field error: %v", err)
	}
	for _, e := range agg.Errors() {
		var fe *field.Error
		if !errors.As(e, &fe) || fe.Field == "" || fe.Field == "<nil>" {
			t.Fatalf("validation error names no field: %v", e)
		}
	}
}

// Check checks a decoder whose values are written with encode (as the
// program writes them, or as a user could): parse(data), given
// MaxDecodeTime, either fails naming source, or gives a value that encode
// writes and parse reads back as the same. It returns what parse gave, for
// the target's own checks.
func Check[T any](t testing.TB, data []byte, source string, parse func([]byte) (T, error), encode func(T) ([]byte, error)) (T, error) {
	t.Helper()
	var v T
	var err error
	Promptly(func() { v, err = parse(data) })
	if err != nil {
		NamesSource(t, err, source)
		return v, err
	}
	again, encErr := encode(v)
	if encErr != nil {
		t.Fatalf("encoding a decoded value: %v", encErr)
	}
	Same(t, v, again, parse)
	return v, nil
}

// YAMLDocument checks a decoder of one of dralab's YAML files (a lab
// configuration, a scenario), whose document type is D: Check with YAML
// as the encoding, and an input that decodes strictly as a D but does not
// parse fails with field errors, each naming its field.
func YAMLDocument[D, T any](t testing.TB, data []byte, source string, parse func([]byte) (T, error)) {
	t.Helper()
	if _, err := Check(t, data, source, parse, YAML[T]); err != nil && strictyaml.Decode(data, new(D)) == nil {
		NamesFields(t, err)
	}
}

// YAML encodes v as YAML, as a user would write it.
func YAML[T any](v T) ([]byte, error) { return yaml.Marshal(v) }

// Same fails t unless data, an encoding of v, decodes to v.
func Same[T any](t testing.TB, v T, data []byte, decode func([]byte) (T, error)) {
	t.Helper()
	again, err := decode(data)
	if err != nil {
		t.Fatalf("a decoded value, encoded again, does not decode: %v\n%s", err, data)
	}
	if !cmp.Equal(v, again, equal...) {
		t.Fatalf("a decoded value, encoded again and decoded, differs (-first +again):\n%s\nencoding:\n%s", cmp.Diff(v, again, equal...), data)
	}
}

// equal compares decoded values field by field, unexported ones too, with
// three allowances for what an encoding does not keep: quantities compare
// by their value ("1.5Gi" and "1536Mi" are one quantity, which a decoder
// may hold in either form); raw JSON (a driver's opaque state) by the
// value it holds, since encoding re-indents it and escapes <, > and & in
// its strings; and an empty map or slice
// equals a nil one (an omitempty field encodes both as nothing, so
// "labels: {}" decodes again as no labels; every consumer treats the two
// alike).
// sameJSON tells whether two raw JSON documents hold the same value
// (numbers compared as written); ones that do not decode compare byte by
// byte.
func sameJSON(a, b json.RawMessage) bool {
	decode := func(raw json.RawMessage) (any, error) {
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		var v any
		return v, d.Decode(&v)
	}
	va, errA := decode(a)
	vb, errB := decode(b)
	if errA == nil && errB == nil {
		return reflect.DeepEqual(va, vb)
	}
	return bytes.Equal(a, b)
}

var equal = []cmp.Option{
	cmpopts.EquateEmpty(),
	// Not where both are empty: EquateEmpty compares those.
	cmp.FilterValues(func(a, b json.RawMessage) bool { return len(a) > 0 || len(b) > 0 },
		cmp.Comparer(sameJSON)),
	cmp.Exporter(func(reflect.Type) bool { return true }),
	cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 }),
}
