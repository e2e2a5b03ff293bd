package build

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Progress is how far a build has come.
type Progress struct {
	// Compiled is the number of packages compiled so far.
	Compiled int
	// Total is the number of packages the build depends on, the standard
	// library's included: an upper bound of what it compiles (what the Go
	// build cache holds is not compiled again). 0 until it is counted.
	Total int
	// Elapsed is the time since the build started.
	Elapsed time.Duration
	// Idle is the time since the last package was compiled.
	Idle time.Duration
}

// idleAfter is how long without a compiled package means the build is
// linking (about a minute for the dralab binary) or in one large package.
const idleAfter = 15 * time.Second

// String says it in one line: "compiling (the first time, and after a
// change), 812 of at most 2431 packages, 4m10s so far, at most about 8 min
// left".
func (p Progress) String() string {
	var b strings.Builder
	b.WriteString("compiling (the first time, and after a change), ")
	if p.Total > 0 {
		fmt.Fprintf(&b, "%d of at most %d packages", p.Compiled, p.Total)
	} else if p.Compiled == 1 {
		b.WriteString("1 package")
	} else {
		fmt.Fprintf(&b, "%d packages", p.Compiled)
	}
	fmt.Fprintf(&b, ", %s so far", p.Elapsed.Round(time.Second))
	if p.Idle >= idleAfter {
		// No estimate from a pace that has stopped.
		b.WriteString("; now linking, or compiling a large package")
	} else if left, ok := p.left(); ok {
		if m := int(left.Round(time.Minute) / time.Minute); m > 0 {
			fmt.Fprintf(&b, ", at most about %d min left", m)
		} else {
			b.WriteString(", under a minute left")
		}
	}
	return b.String()
}

// left estimates the time left from the pace so far, once the pace means
// something (50 packages): an upper bound, like Total. Linking the binary
// comes after the last package and is not in it.
func (p Progress) left() (time.Duration, bool) {
	if p.Total == 0 || p.Compiled < 50 || p.Compiled >= p.Total {
		return 0, false
	}
	return time.Duration(int64(p.Elapsed) * int64(p.Total-p.Compiled) / int64(p.Compiled)), true
}

type reporterKey struct{}

// WithReporter returns a context whose builds (Dralab) tell report how far
// they have come.
func WithReporter(ctx context.Context, report func(Progress)) context.Context {
	return context.WithValue(ctx, reporterKey{}, report)
}

// reporterFrom is the reporter ctx carries, or nil.
func reporterFrom(ctx context.Context) func(Progress) {
	r, _ := ctx.Value(reporterKey{}).(func(Progress))
	return r
}

// counter reads go build -v's stderr: a line that is an import path is a
// package compiled. Once the first is compiled (so the build is not a
// cached one), it counts the packages of the build's graph (go list
// -deps), and it reports every few seconds while the build runs, the
// link's minute included.
type counter struct {
	report  func(Progress)
	start   time.Time
	mu      sync.Mutex
	line    []byte
	p       Progress
	last    time.Time // of the last compiled package
	listing sync.Once
	ticking chan struct{}
	done    chan struct{}
	ctx     context.Context
	dir     string
	env     []string
	pkgs    []string
}

func newCounter(ctx context.Context, report func(Progress), dir string, env, pkgs []string) *counter {
	return &counter{report: report, start: time.Now(), ctx: ctx, dir: dir, env: env, pkgs: pkgs, done: make(chan struct{})}
}

// Write implements io.Writer.
func (c *counter) Write(b []byte) (int, error) {
	c.mu.Lock()
	c.line = append(c.line, b...)
	compiled := 0
	for {
		i := bytes.IndexByte(c.line, '\n')
		if i < 0 {
			break
		}
		if isImportPath(string(c.line[:i])) {
			compiled++
		}
		c.line = c.line[i+1:]
	}
	c.p.Compiled += compiled
	if compiled > 0 {
		c.last = time.Now()
	}
	c.mu.Unlock()
	if compiled > 0 {
		c.listing.Do(c.begin)
	}
	return len(b), nil
}

// begin starts counting the graph and reporting.
func (c *counter) begin() {
	go func() {
		cmd := exec.CommandContext(c.ctx, "go", append([]string{"list", "-deps"}, c.pkgs...)...)
		cmd.Dir, cmd.Env = c.dir, c.env
		out, err := cmd.Output()
		if err != nil {
			return // the build says what is wrong; the count stays unknown
		}
		n := 0
		for sc := bufio.NewScanner(bytes.NewReader(out)); sc.Scan(); {
			n++
		}
		c.mu.Lock()
		c.p.Total = n
		c.mu.Unlock()
	}()
	c.ticking = make(chan struct{})
	go func() {
		defer close(c.ticking)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			c.tell()
			select {
			case <-c.done:
				return
			case <-t.C:
			}
		}
	}()
}

func (c *counter) tell() {
	c.mu.Lock()
	p := c.p
	p.Idle = time.Since(c.last)
	c.mu.Unlock()
	p.Elapsed = time.Since(c.start)
	c.report(p)
}

// stop ends the reports.
func (c *counter) stop() {
	close(c.done)
	if c.ticking != nil {
		<-c.ticking
	}
}

// isImportPath tells a package go build -v names from the other lines of
// its stderr (errors name a file and position, "# pkg" heads a package's
// errors).
func isImportPath(s string) bool {
	if s == "" || strings.ContainsAny(s, " \t:#") {
		return false
	}
	return true
}
