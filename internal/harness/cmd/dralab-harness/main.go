// Command dralab-harness runs the mage targets whose code is heavy to
// compile (Helm's chart linter, the scale bench's plots), so that the mage
// binary, which every target and a workshop's first lab:up compile, links
// none of it. Each target runs it as `go run ./internal/harness/cmd/dralab-harness
// <target>`; the Go build cache keeps the program between runs.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/ui"
)

var targets = map[string]func(ctx context.Context) error{
	"chart-lint":  chartLint,
	"bench-scale": benchScale,
}

func main() {
	if len(os.Args) != 2 || targets[os.Args[1]] == nil {
		fmt.Fprintln(os.Stderr, "usage: dralab-harness chart-lint|bench-scale")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := targets[os.Args[1]](ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
}

// buildDralab builds the dralab binary, its progress on one moving line.
func buildDralab(ctx context.Context) (string, error) {
	update, done := ui.Stderr().Live("Building dralab")
	bin, err := build.Dralab(build.WithReporter(ctx, func(p build.Progress) { update(p.String()) }))
	done(err)
	return bin, err
}
