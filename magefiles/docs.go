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

// Screenshot runs the dashboard's and the scenario report's browser tests
// and keeps the screenshots they take as docs/images/dashboard.png and
// docs/images/scenario-report.png (needs Chromium: deps:browser).
func (Docs) Screenshot() error {
	mg.Deps(Deps.Browser)
	dir, err := os.MkdirTemp("", "dralab-screenshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := sh.RunWithV(map[string]string{"ARTIFACTS": dir}, "go", "test", "-count=1", "-run", "^(TestDashboardInABrowser|TestScenarioReportInABrowser)$", "./internal/dashboard"); err != nil {
		return err
	}
	for _, name := range []string{"dashboard.png", "scenario-report.png"} {
		data, err := os.ReadFile(filepath.Join(dir, name))
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
