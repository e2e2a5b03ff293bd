//go:build mage

package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"
)

// Docs regenerates what the docs show.
type Docs mg.Namespace

// Check verifies that what README.md and docs/ tell people to run exists:
// every mage target, every dralab-conformance flag, every folder given to
// go test (go test ./docs; test:all runs it too).
func (Docs) Check() error {
	return sh.RunV("go", "test", "-count=1", "-v", "./docs")
}

// Screenshot takes the docs' pictures from real runs: the prioritized-
// fallback scenario on the default embedded lab, with the lab's live
// dashboard open in Chromium once the cluster is full
// (docs/images/dashboard.png), and that scenario's HTML report as
// scenario:run writes it (docs/images/scenario-report.png). Needs Chromium
// (deps:browser); a few minutes, the e2e suite's lab included.
func (Docs) Screenshot() error {
	mg.Deps(Deps.Browser)
	dir, err := os.MkdirTemp("", "dralab-screenshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	env := map[string]string{"ARTIFACTS": dir}
	if err := sh.RunWithV(env, "go", "test", "-count=1", "-run", "^TestDashboardDuringFallback$", "./e2e"); err != nil {
		return err
	}
	if err := sh.RunWithV(env, "go", "test", "-count=1", "-run", "^TestScenarios$", "./e2e", "-args", "--labels", "scenario=prioritized-fallback"); err != nil {
		return err
	}
	report := filepath.Join(dir, "scenario-report.png")
	if err := sh.RunV("go", "run", "./internal/harness/cmd/dralab-harness", "screenshot", filepath.Join(dir, "scenario-prioritized-fallback.html"), report); err != nil {
		return err
	}
	for name, from := range map[string]string{"dashboard.png": filepath.Join(dir, "dashboard-prioritized-fallback.png"), "scenario-report.png": report} {
		data, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		path := filepath.Join("docs", "images", name)
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return err
		}
		fmt.Println(path)
	}
	return nil
}
