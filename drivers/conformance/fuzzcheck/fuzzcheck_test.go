package fuzzcheck

import (
	"encoding/json"
	"testing"
)

// Raw JSON compares by the value it holds: encoding/json re-indents a
// RawMessage and escapes &, < and > in its strings (a checkpoint's driver
// state came back as {"\u00260": 0} from {"&0":0}: found by
// FuzzParseCheckpoint), which is the same value.
func TestSameJSON(t *testing.T) {
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{`{"&0":0, "00": [0]}`, "{\n  \"\\u00260\": 0,\n  \"00\": [\n    0\n  ]\n}", true},
		{`{"a":"<b>"}`, `{"a":"\u003cb\u003e"}`, true},
		{`{"a":1}`, `{"a":2}`, false},
		{`{"a":1}`, `{"a":1.0}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`{"a":`, `{"a":`, true},
		{`{"a":`, `{"b":`, false},
	} {
		if got := sameJSON(json.RawMessage(c.a), json.RawMessage(c.b)); got != c.same {
			t.Errorf("sameJSON(%s, %s) = %v, want %v", c.a, c.b, got, c.same)
		}
	}
}
