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

// Screenshot runs the dashboard's browser test and keeps the screenshot it
// takes as docs/images/dashboard.png (needs Chromium: deps:browser).
func (Docs) Screenshot() error {
	mg.Deps(Deps.Browser)
	dir, err := os.MkdirTemp("", "dralab-screenshot-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := sh.RunWithV(map[string]string{"ARTIFACTS": dir}, "go", "test", "-count=1", "-run", "^TestDashboardInABrowser$", "./internal/dashboard"); err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, "dashboard.png"))
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join("docs", "images", "dashboard.png"), data, 0o644); err != nil {
		return err
	}
	fmt.Println("docs/images/dashboard.png")
	return nil
}
