//go:build mage

package main

import "github.com/dralab/dralab/internal/mageboot"

// The bootstrap (mage.go) lets mage run this binary at once, without
// asking the go command whether it is up to date, while nothing changed
// since it was built: the binary records what it was built from.
func init() { mageboot.Built() }
