// Package ui owns the lines a person reads: one line per step, "✓" when it
// ends well and "✗" when it does not, a spinner only on a real terminal, and
// plain text in CI, with NO_COLOR or TERM=dumb. Library packages never print;
// they report steps through a Progress func that commands wire to a UI.
package ui

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// Progress starts a step and returns the function that ends it. Libraries
// accept a Progress; NoProgress ignores everything.
type Progress func(step string) (done func(err error))

// NoProgress is a Progress that shows nothing.
func NoProgress(string) func(error) { return func(error) {} }

// UI writes progress lines to a writer.
type UI struct {
	out     io.Writer
	fancy   bool // spinner and colour
	mu      sync.Mutex
	stopped chan struct{}
	// plainEvery overrides plainEvery (tests).
	plainEvery time.Duration
}

// New returns a UI on out. Spinner and colour are used only when out is a
// terminal, CI is unset, NO_COLOR is unset and TERM is not "dumb".
func New(out io.Writer) *UI {
	fancy := false
	if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fancy = os.Getenv("CI") == "" && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
	}
	return &UI{out: out, fancy: fancy}
}

// Stderr is the UI most commands use.
func Stderr() *UI { return New(os.Stderr) }

// Live starts a step whose line moves: update replaces what the line
// says after the step's name (packages compiled, time left); done ends
// it as Progress's does.
type Live func(step string) (update func(detail string), done func(err error))

type liveKey struct{}

// WithLive returns a context that carries live, for libraries whose long
// steps can say how far they have come (a build): a command that shows a
// moving line sets it.
func WithLive(ctx context.Context, live Live) context.Context {
	return context.WithValue(ctx, liveKey{}, live)
}

// LiveOr is the Live that ctx carries, or else progress's steps, whose
// updates show nothing.
func LiveOr(ctx context.Context, progress Progress) Live {
	if live, ok := ctx.Value(liveKey{}).(Live); ok && live != nil {
		return live
	}
	return func(step string) (func(string), func(error)) { return func(string) {}, progress(step) }
}

// plainEvery is how often a plain (CI) line repeats a live step's detail.
const plainEvery = 30 * time.Second

// Step implements Progress.
func (u *UI) Step(step string) func(error) {
	_, done := u.Live(step)
	return done
}

// Live implements Live. On a terminal the step's single line shows the
// spinner and the latest detail; in plain output a detail is printed as
// its own line at most every 30 s, so that a log shows the step is alive.
func (u *UI) Live(step string) (func(string), func(error)) {
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var detail string // guarded by u.mu
	var printed time.Time
	if u.fancy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			frames := []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for i := 0; ; i++ {
				u.mu.Lock()
				line := step
				if detail != "" {
					line += ": " + detail
				}
				fmt.Fprintf(u.out, "\r %s %s \033[K", frames[i%len(frames)], line)
				u.mu.Unlock()
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		}()
	} else {
		u.mu.Lock()
		fmt.Fprintf(u.out, " • %s ...\n", step)
		u.mu.Unlock()
	}
	update := func(d string) {
		u.mu.Lock()
		defer u.mu.Unlock()
		detail = d
		if !u.fancy && time.Since(printed) >= u.every() {
			printed = time.Now()
			fmt.Fprintf(u.out, "   %s: %s\n", step, d)
		}
	}
	var once sync.Once
	done := func(err error) {
		once.Do(func() {
			close(stop)
			wg.Wait()
			took := time.Since(start).Round(100 * time.Millisecond)
			u.mu.Lock()
			defer u.mu.Unlock()
			prefix := ""
			if u.fancy {
				prefix = "\r\033[K"
			}
			if err != nil {
				fmt.Fprintf(u.out, "%s %s %s (%s)\n", prefix, u.color("✗", 31), step, took)
				return
			}
			fmt.Fprintf(u.out, "%s %s %s (%s)\n", prefix, u.color("✓", 32), step, took)
		})
	}
	return update, done
}

func (u *UI) every() time.Duration {
	if u.plainEvery != 0 {
		return u.plainEvery
	}
	return plainEvery
}

// Progress returns the UI's Step as a Progress.
func (u *UI) Progress() Progress { return u.Step }

// Println writes a line as is.
func (u *UI) Println(a ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintln(u.out, a...)
}

// Next prints the commands to type next, one per line, indented.
func (u *UI) Next(intro string, commands ...string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintf(u.out, "\n%s\n", intro)
	for _, c := range commands {
		fmt.Fprintf(u.out, "  %s\n", c)
	}
}

func (u *UI) color(s string, code int) string {
	if !u.fancy {
		return s
	}
	return fmt.Sprintf("\033[%dm%s\033[0m", code, s)
}
