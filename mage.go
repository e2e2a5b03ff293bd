//go:build ignore

// Bootstrap: `go run mage.go <target>` runs dralab's mage targets with
// nothing installed. The first time, it compiles what the targets import
// on a line that says how far it has come, before mage compiles them
// into its binary; while nothing changed since, mage runs that binary at
// once.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/magefile/mage/mage"

	"github.com/dralab/dralab/internal/mageboot"
	"github.com/dralab/dralab/internal/ui"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	env, err := mageboot.Prepare(ctx, ui.Stderr(), ".", os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		os.Exit(1)
	}
	for k, v := range env {
		os.Setenv(k, v)
	}
	os.Exit(mage.Main())
}
