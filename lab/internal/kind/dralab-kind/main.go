// Command dralab-kind is the kind backend of the lab, in a program of its
// own (see lab/internal/kindcmd): the lab builds and runs it for every
// operation on a kind lab.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/dralab/dralab/lab/internal/kind"
	"github.com/dralab/dralab/lab/internal/kindcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := kindcmd.Serve(ctx, func(root string) kindcmd.Backend { return kind.New(root) }, os.Args[1:], os.Stdin, os.Stdout)
	stop()
	os.Exit(code)
}
