package ui

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestPlainStepsInCI(t *testing.T) {
	var out bytes.Buffer
	u := New(&out) // not a terminal: plain lines, no escapes
	u.Step("Starting control plane")(nil)
	u.Step("Waiting for nodes")(errors.New("boom"))
	got := out.String()
	for _, want := range []string{" • Starting control plane ...\n", " ✓ Starting control plane (", " ✗ Waiting for nodes ("} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "\033") || strings.Contains(got, "\r") {
		t.Errorf("plain output has terminal escapes: %q", got)
	}
}

func TestDoneTwiceWritesOnce(t *testing.T) {
	var out bytes.Buffer
	done := New(&out).Step("x")
	done(nil)
	done(errors.New("late"))
	if n := strings.Count(out.String(), "x ("); n != 1 {
		t.Errorf("step ended %d times:\n%s", n, out.String())
	}
}
