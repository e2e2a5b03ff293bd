package cluster

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A look that the wait's own deadline cuts short (a log still being read
// when the time is up) leaves the last thing seen as it was: the error
// says what the check saw last, not the state a half-done look returned
// with the deadline's error.
func TestPollKeepsWhatWasSeenWhenTheDeadlineCutsALook(t *testing.T) {
	looks := 0
	err := poll(context.Background(), 300*time.Millisecond, "the file", func(ctx context.Context) (string, bool, error) {
		looks++
		if looks == 1 {
			return "running; its log shows no file", false, nil
		}
		<-ctx.Done() // a request in flight when the wait ends
		return "Running", false, ctx.Err()
	})
	if err == nil {
		t.Fatal("the wait ended unmet without an error")
	}
	msg := err.Error()
	for _, want := range []string{"waited 300ms for the file", "last seen: running; its log shows no file"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "last seen: Running") || strings.Contains(msg, "deadline") {
		t.Errorf("%q reports the cut-short look", msg)
	}
}
