package driverauth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// TokenTimes are when a ServiceAccount token was issued and when it
// expires, by the wall clock: what the API server compares with its own
// clock when the token is presented.
type TokenTimes struct {
	Issued, Expires time.Time
}

// Lifetime is how long the token was issued for.
func (t TokenTimes) Lifetime() time.Duration { return t.Expires.Sub(t.Issued) }

// ReadTokenTimes reads the issue and expiry times of the token in file
// path. It reads the JWT's claims only: whether the API server still
// accepts the token is the API server's to say (a TokenReview).
func ReadTokenTimes(path string) (TokenTimes, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return TokenTimes{}, err
	}
	t, err := ParseTokenTimes(strings.TrimSpace(string(data)))
	if err != nil {
		return TokenTimes{}, fmt.Errorf("token %s: %w", path, err)
	}
	return t, nil
}

// ParseTokenTimes reads the iat and exp claims of a JWT.
func ParseTokenTimes(token string) (TokenTimes, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return TokenTimes{}, errors.New("not a JWT (header.claims.signature)")
	}
	payload, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return TokenTimes{}, fmt.Errorf("decoding its claims: %w", err)
	}
	var claims struct {
		IssuedAt  *int64 `json:"iat"`
		ExpiresAt *int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		return TokenTimes{}, fmt.Errorf("decoding its claims: %w", err)
	}
	if claims.IssuedAt == nil || claims.ExpiresAt == nil {
		return TokenTimes{}, errors.New("its claims lack iat or exp: not a bound ServiceAccount token")
	}
	return TokenTimes{Issued: time.Unix(*claims.IssuedAt, 0), Expires: time.Unix(*claims.ExpiresAt, 0)}, nil
}

// The lab's drivers' tokens. The API server's shortest allowed lifetime
// is 10 min. A token is renewed once a third of its life has passed, by
// the wall clock, which the API server judges it by. The lab looks every
// TokenCheck rather than sleeping until the renewal is due: a timer runs on
// the monotonic clock, which stops while a laptop sleeps, so a renewal
// timed by a timer alone comes its whole period late after a lunch break,
// with every driver refused meanwhile.
const (
	TokenLifetime = time.Hour
	TokenCheck    = 15 * time.Second
)

// RenewAt is when the token is to be renewed.
func (t TokenTimes) RenewAt() time.Time { return t.Issued.Add(t.Lifetime() / 3) }

// Overdue tells whether a keeper that looks every TokenCheck would have
// renewed the token by now: a token still in its file then was not kept.
func (t TokenTimes) Overdue(now time.Time) bool {
	return now.After(t.RenewAt().Add(2 * TokenCheck))
}
