package results

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
)

// Echo returns a writer that takes the event stream of go test -json and
// writes what the tests print, as go test -v would show it, to w: a run
// can keep its events for the report and still show people its progress.
// Lines that are not events pass through.
func Echo(w io.Writer) io.Writer { return &echo{w: w} }

type echo struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

func (e *echo) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.buf = append(e.buf, p...)
	for {
		i := bytes.IndexByte(e.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := e.buf[:i+1]
		var ev event
		var err error
		switch {
		case json.Unmarshal(line, &ev) != nil || ev.Action == "":
			_, err = e.w.Write(line)
		case ev.Action == "output" || ev.Action == "build-output":
			_, err = io.WriteString(e.w, ev.Output)
		}
		e.buf = e.buf[i+1:]
		if err != nil {
			return len(p), err
		}
	}
}
