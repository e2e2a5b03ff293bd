package scenarios

import (
	"strings"
	"testing"
	"time"
)

// A step that holds for a while is not done when its expectations first
// hold: it is done once they have held that long, and fails at once, with
// what moved and how long it had held, when one stops holding meanwhile. A
// step without holdsFor is done at the first look where they hold.
func TestHeldWaitsThenFailsWhatMoves(t *testing.T) {
	r := &run{}
	var since time.Time
	waiting := StepResult{}
	if r.held(&waiting, 0, &since) != true {
		t.Fatal("a step without holdsFor whose expectations hold is not done")
	}
	const hold = 300 * time.Millisecond
	if r.held(&StepResult{Failures: []string{"pod batch: phase: expected Pending"}}, hold, &since) || !since.IsZero() {
		t.Fatal("a step whose expectations do not hold yet is done, or counts as holding")
	}
	if r.held(&StepResult{}, hold, &since) || since.IsZero() {
		t.Fatal("a step is done the moment its expectations first hold, or does not start counting")
	}
	if r.held(&StepResult{}, hold, &since) {
		t.Fatal("a step is done before it held for holdsFor")
	}
	time.Sleep(hold)
	if !r.held(&StepResult{}, hold, &since) {
		t.Fatal("a step that held for holdsFor is not done")
	}

	// The batch pod is scheduled while the step holds: done at once,
	// failed, saying how long it had held.
	since = time.Time{}
	r.held(&StepResult{}, time.Minute, &since)
	moved := StepResult{Failures: []string{"expect[0] (pods batch): pod batch: phase: expected Pending, got Running"}}
	if !r.held(&moved, time.Minute, &since) {
		t.Fatal("a step whose expectation stopped holding goes on")
	}
	if len(moved.Failures) != 1 || !strings.HasPrefix(moved.Failures[0], "held for ") || !strings.Contains(moved.Failures[0], "of the 1m0s it must, then: expect[0] (pods batch)") {
		t.Errorf("failures %q; want how long it held and what moved", moved.Failures)
	}
}
