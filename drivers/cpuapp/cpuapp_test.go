package cpuapp

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// --list shows the complexes as the driver would publish them; bad counts
// are one error naming the flag.
func TestList(t *testing.T) {
	var out bytes.Buffer
	if err := List(context.Background(), Options{Complexes: 2, CPUsPerComplex: 8}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"name: ccx-0", "name: ccx-1", "string: 8-15", "deviceMultiplier: \"8\""} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--list lacks %q:\n%s", want, out.String())
		}
	}
	if err := List(context.Background(), Options{Complexes: 2}, &out); err == nil || !strings.Contains(err.Error(), "--cpus-per-complex 0") {
		t.Errorf("no CPUs per complex: %v, want an error naming --cpus-per-complex", err)
	}
}
