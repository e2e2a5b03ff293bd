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

// Dashboard measures the dashboard on the default lab: page weight, time
// to first paint in Chromium, and the lab process's CPU seconds and peak
// RSS during a 100-pod wave without and with the page open.
func (Bench) Dashboard() error {
	mg.Deps(Deps.Browser)
	return sh.RunV("go", "test", "./lab", "-run", "^$", "-bench", "BenchmarkDashboard", "-benchtime", "1x")
}
