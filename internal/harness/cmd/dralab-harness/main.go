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

// withArgs are the targets that take arguments.
var withArgs = map[string]func(ctx context.Context, args []string) error{
	"screenshot": screenshot,
}

func main() {
	if len(os.Args) < 2 || targets[os.Args[1]] == nil && withArgs[os.Args[1]] == nil || targets[os.Args[1]] != nil && len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dralab-harness chart-lint|bench-scale|screenshot PAGE.html OUT.png")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if run := targets[os.Args[1]]; run != nil {
		err = run(ctx)
	} else {
		err = withArgs[os.Args[1]](ctx, os.Args[2:])
	}
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
