package sanity_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/sanity"
)

// The checks on drivers, right and wrong, are in drivers/kit: the kit
// builds the drivers they run against.

func TestCheckNamesAreStable(t *testing.T) {
	var names []string
	for _, c := range sanity.Checks() {
		if c.Rule == "" {
			t.Errorf("check %s has no rule", c.Name)
		}
		names = append(names, c.Name)
	}
	want := []string{"registration", "prepare", "cdi-ids-resolve", "prepare-idempotent", "unprepare-idempotent", "unknown-claim", "concurrent", "restart"}
	if !slices.Equal(names, want) {
		t.Errorf("checks = %v, want %v", names, want)
	}
}

func TestInvalidConfigFailsEveryCheck(t *testing.T) {
	got := sanity.Run(context.Background(), sanity.Config{})
	if len(got) != len(sanity.Checks()) {
		t.Fatalf("%d results", len(got))
	}
	for _, r := range got {
		if r.Status != results.Failed || !strings.HasPrefix(r.Message, "setup: ") || !strings.Contains(r.Message, "no Manifest") {
			t.Errorf("%s: %s %q, want a setup failure naming the missing Manifest", r.Check, r.Status, r.Message)
		}
	}
}
