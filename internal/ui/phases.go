package ui

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Phases records how long each phase of a long command took, so that its
// end says where the time went whether it ended well or not: a CI run that
// ran long names the phase that took the time.
type Phases struct {
	mu    sync.Mutex
	start time.Time
	rows  []phase
}

type phase struct {
	name   string
	took   time.Duration
	err    error
	beside bool // ran in the background, beside the others
	open   bool // started, not ended
}

// NewPhases starts the clock of a command's phases.
func NewPhases() *Phases { return &Phases{start: time.Now()} }

// Run runs f as the phase name and records how long it took and whether
// it failed.
func (p *Phases) Run(name string, f func() error) error {
	end := p.Start(name, false)
	err := f()
	end(err)
	return err
}

// Start starts the phase name; the returned func ends it. A phase run
// beside others (one of several test runs at once) is marked so: its time
// overlaps theirs.
func (p *Phases) Start(name string, beside bool) (end func(error)) {
	start := time.Now()
	p.mu.Lock()
	i := len(p.rows)
	p.rows = append(p.rows, phase{name: name, beside: beside, open: true})
	p.mu.Unlock()
	var once sync.Once
	return func(err error) {
		once.Do(func() {
			p.mu.Lock()
			defer p.mu.Unlock()
			p.rows[i].took, p.rows[i].err, p.rows[i].open = time.Since(start), err, false
		})
	}
}

// Write writes one line per phase, in the order they started: its seconds
// and whether it failed, ran beside the others or had not ended; then the
// total since NewPhases.
func (p *Phases) Write(w io.Writer) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b strings.Builder
	for _, r := range p.rows {
		var notes []string
		secs := fmt.Sprintf("%.0f s", r.took.Seconds())
		switch {
		case r.open:
			secs, notes = "-", append(notes, "not ended")
		case r.err != nil:
			notes = append(notes, "failed")
		}
		if r.beside {
			notes = append(notes, "run beside others")
		}
		line := fmt.Sprintf("%8s  %s", secs, r.name)
		if len(notes) > 0 {
			line += " (" + strings.Join(notes, ", ") + ")"
		}
		b.WriteString(line + "\n")
	}
	fmt.Fprintf(&b, "%8s  in all\n", fmt.Sprintf("%.0f s", time.Since(p.start).Seconds()))
	_, err := io.WriteString(w, b.String())
	return err
}
