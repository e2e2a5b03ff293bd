package soak

import (
	"errors"
	"strings"
	"testing"
)

// TestSummaryEndsWithVerdict: the summary's last line says whether the
// soak passed and, when it failed, why and how to repeat it, whatever
// failed: violations or a lab that did not come back.
func TestSummaryEndsWithVerdict(t *testing.T) {
	for _, tc := range []struct {
		name    string
		failure error
		want    []string
	}{
		{"passed", nil, []string{"Result:", "passed"}},
		{"violations", ErrViolations, []string{"Result:", "FAILED", "SOAK_SEED=7", ErrViolations.Error()}},
		{"resume", errors.Join(errors.New("resuming the lab: timed out"), errors.New("lab:down: busy")), []string{"FAILED", "resuming the lab: timed out; lab:down: busy"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Report{Lab: "soak", Seed: 7}
			if tc.failure != nil {
				r.Failure = tc.failure.Error()
			}
			var b strings.Builder
			if err := WriteSummary(&b, r); err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
			last := lines[len(lines)-1]
			for _, w := range tc.want {
				if !strings.Contains(last, w) {
					t.Errorf("last line %q lacks %q", last, w)
				}
			}
			if tc.failure == nil && strings.Contains(last, "FAILED") {
				t.Errorf("a passed soak's last line says %q", last)
			}
		})
	}
}
