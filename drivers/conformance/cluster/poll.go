package cluster

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// pollInterval is how often the checks look again at what they wait for.
const pollInterval = 200 * time.Millisecond

// verdict is a condition's finding that ends a poll: the check's outcome,
// not a hiccup of the API server to retry past.
type verdict struct{ error }

// settle makes err the poll's outcome.
func settle(err error) error { return verdict{err} }

// poll calls cond until it is done, settles, or timeout passes. cond
// returns what it saw, in words for the error; an error wrapped by settle
// ends the poll with it, any other (the API server's, the client's rate
// limiter's, a done context's) is remembered and the poll goes on. When
// the wait ends unmet, the error says what was waited for and how long,
// then the last thing seen, then the last such error: an error of the
// wait itself never stands in for what was observed.
func poll(ctx context.Context, timeout time.Duration, what string, cond func(context.Context) (seen string, done bool, err error)) error {
	var (
		seen    string
		lastErr error
	)
	err := wait.PollUntilContextTimeout(ctx, pollInterval, timeout, true, func(ctx context.Context) (bool, error) {
		s, done, err := cond(ctx)
		if err != nil && ctx.Err() != nil {
			// The wait ended during this look: what it saw was cut
			// short (a log not read), and its error is the wait's own.
			return false, nil
		}
		if s != "" {
			seen = s
		}
		if v := (verdict{}); errors.As(err, &v) {
			return false, v
		}
		if err != nil {
			lastErr = err
			return false, nil
		}
		return done, nil
	})
	if err == nil {
		return nil
	}
	if v := (verdict{}); errors.As(err, &v) {
		return v.error
	}
	msg := fmt.Sprintf("waited %v for %s", timeout, what)
	if ctx.Err() != nil {
		msg = fmt.Sprintf("stopped waiting for %s: %v", what, context.Cause(ctx))
	}
	if seen != "" {
		msg += "; last seen: " + seen
	}
	if lastErr != nil {
		msg += "; last error: " + lastErr.Error()
	}
	return errors.New(msg)
}
