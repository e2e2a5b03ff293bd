package ui

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
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

// A live step in CI: its detail is printed at once, then at most every
// interval, so a long build shows it is alive without flooding the log.
func TestLiveStepInCI(t *testing.T) {
	var out bytes.Buffer
	u := New(&out)
	u.plainEvery = time.Hour
	update, done := u.Live("Building dralab")
	update("10 of at most 100 packages compiled")
	update("20 of at most 100 packages compiled") // within the interval: not printed
	done(nil)
	got := out.String()
	if !strings.Contains(got, "   Building dralab: 10 of at most 100 packages compiled\n") || strings.Contains(got, "20 of") {
		t.Errorf("live step in CI:\n%s", got)
	}
	if !strings.Contains(got, " ✓ Building dralab (") || strings.Contains(got, "\r") {
		t.Errorf("live step's end in CI:\n%s", got)
	}

	out.Reset()
	u.plainEvery = time.Nanosecond
	update, done = u.Live("x")
	update("one")
	time.Sleep(time.Millisecond)
	update("two")
	done(nil)
	if got := out.String(); !strings.Contains(got, "x: one\n") || !strings.Contains(got, "x: two\n") {
		t.Errorf("updates an interval apart are each printed:\n%s", got)
	}
}

// A run's phases are listed in order with their seconds, a failed one and
// one that never ended named as such, and the whole run's total last.
func TestPhasesSayWhereTheTimeWent(t *testing.T) {
	p := NewPhases()
	if err := p.Run("vet", func() error { time.Sleep(20 * time.Millisecond); return nil }); err != nil {
		t.Fatal(err)
	}
	endCross := p.Start("cross-builds", true)
	if err := p.Run("tests", func() error { return errors.New("boom") }); err == nil {
		t.Fatal("Run lost the phase's error")
	}
	p.Start("soak", false) // never ended: the run stopped before
	var out bytes.Buffer
	if err := p.Write(&out); err != nil {
		t.Fatal(err)
	}
	endCross(nil) // too late for the summary above
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{
		"0 s  vet",
		"-  cross-builds (not ended, run beside others)",
		"0 s  tests (failed)",
		"-  soak (not ended)",
		"s  in all",
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], w) {
			t.Errorf("line %d = %q, want it to end %q", i, lines[i], w)
		}
	}
}
