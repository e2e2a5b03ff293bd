package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/dralab/dralab/internal/dashboard"
)

// screenshot is docs:screenshot's last step: a page a real run wrote (a
// scenario's HTML report), opened in headless Chromium from disk and
// captured whole, once the page says the run passed. Usage: dralab-harness screenshot PAGE.html OUT.png.
func screenshot(ctx context.Context, args []string) error {
	if len(args) != 2 {
		return fmt.Errorf("usage: dralab-harness screenshot PAGE.html OUT.png")
	}
	page, err := filepath.Abs(args[0])
	if err != nil {
		return err
	}
	if _, err := os.Stat(page); err != nil {
		return fmt.Errorf("the page to capture: %w", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(dashboard.Chromium), chromedp.NoSandbox, chromedp.WindowSize(1280, 900))
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	bctx, cancelTimeout := context.WithTimeout(bctx, time.Minute)
	defer cancelTimeout()
	if err := chromedp.Do(bctx, chromedp.Navigate("file://"+page), chromedp.WaitVisible(`section.step li.device`)); err != nil {
		return fmt.Errorf("opening %s in %s (go run mage.go deps:browser installs it): %w", page, dashboard.Chromium, err)
	}
	// The docs show a run that passed, not a failure.
	passed, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.getElementById("verdict").dataset.passed`))
	if err != nil {
		return fmt.Errorf("reading %s's verdict: %w", page, err)
	}
	if passed != "true" {
		return fmt.Errorf("%s is the report of a run that did not pass: no picture for the docs", page)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Errorf("capturing %s: %w", page, err)
	}
	return os.WriteFile(args[1], shot, 0o644)
}
