//go:build ignore

// Bootstrap: `go run mage.go <target>` runs dralab's mage targets with
// nothing installed.
package main

import (
	"os"

	"github.com/magefile/mage/mage"
)

func main() { os.Exit(mage.Main()) }
