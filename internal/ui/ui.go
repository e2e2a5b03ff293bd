// Package ui owns the lines a person reads: one line per step, "✓" when it
// ends well and "✗" when it does not, a spinner only on a real terminal, and
// plain text in CI, with NO_COLOR or TERM=dumb. Library packages never print;
// they report steps through a Progress func that commands wire to a UI.
package ui

import (
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

// Step implements Progress.
func (u *UI) Step(step string) func(error) {
	start := time.Now()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if u.fancy {
		wg.Add(1)
		go func() {
			defer wg.Done()
			frames := []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for i := 0; ; i++ {
				u.mu.Lock()
				fmt.Fprintf(u.out, "\r %s %s ", frames[i%len(frames)], step)
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
	var once sync.Once
	return func(err error) {
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
