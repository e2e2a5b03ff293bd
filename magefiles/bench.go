//go:build mage

package main

import (
	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Bench runs benchmarks; run them on a quiet machine.
type Bench mg.Namespace

// Lab measures the default lab from lab:up to every node Ready (warm build)
// and its memory per process.
func (Bench) Lab() error {
	return sh.RunV("go", "test", "./lab", "-run", "^$", "-bench", "BenchmarkUp", "-benchtime", "3x")
}
