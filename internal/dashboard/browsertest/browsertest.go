// Package browsertest starts a real headless Chromium for tests of the
// dashboard's pages, with what the page reports as wrong collected: console
// errors, uncaught exceptions, and requests that leave the page's origin.
package browsertest

import (
	"context"
	"fmt"
	"os/exec"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/dralab/dralab/internal/dashboard"
)

// Browser is a headless Chromium tab.
type Browser struct {
	// Ctx runs chromedp actions in the tab.
	Ctx context.Context

	mu       sync.Mutex
	problems []string
	requests []string
}

// New starts Chromium for a test; the test fails when it is missing (go
// run mage.go deps:browser installs it) and is skipped with -short, since a
// browser is not a unit test. The browser stops with the test.
func New(t testing.TB) *Browser {
	t.Helper()
	if testing.Short() {
		t.Skip("a real browser is not a unit test: go test without -short runs it")
	}
	path, err := exec.LookPath(dashboard.Chromium)
	if err != nil {
		t.Fatalf("Chromium is not installed (%v): go run mage.go deps:browser installs Debian's", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &Browser{Ctx: ctx}
	if err := chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				b.problems = append(b.problems, fmt.Sprintf("console error: %v", ev.Args))
			}
		case *runtime.EventExceptionThrown:
			b.problems = append(b.problems, fmt.Sprintf("exception: %s at %d:%d", ev.ExceptionDetails.Text, ev.ExceptionDetails.LineNumber, ev.ExceptionDetails.ColumnNumber))
		case *network.EventRequestWillBeSent:
			b.requests = append(b.requests, ev.Request.URL)
		}
	}); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("starting %s: %v", path, err)
	}
	return b
}

// Problems are the console errors and uncaught exceptions so far.
func (b *Browser) Problems() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.problems...)
}

// Requests are the URLs the tab requested so far, the pages included.
func (b *Browser) Requests() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.requests...)
}
