package strictyaml

import (
	"strings"
	"testing"
)

type doc struct {
	Name  string `json:"name"`
	Count int    `json:"count"`
}

func TestDecode(t *testing.T) {
	var d doc
	if err := Decode([]byte("name: a\ncount: 2\n"), &d); err != nil || d != (doc{"a", 2}) {
		t.Fatalf("Decode = %+v, %v", d, err)
	}
	for in, want := range map[string]string{
		"":                   "empty",
		"# only a comment\n": "only comments",
		"name: a\nnmae: b\n": `unknown field "nmae"`,
		"name: a\nname: b\n": `key "name" already set`,
		"count: two\n":       "count",
		"name: [unclosed\n":  "yaml",
	} {
		var d doc
		err := Decode([]byte(in), &d)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Decode(%q) = %v, want an error containing %q", in, err, want)
		}
	}
}
