//go:build mage

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/scenarios"
)

// Scenario lists and runs scenarios on the running lab.
type Scenario mg.Namespace

// List lists the scenarios: the built-in ones, or those of the folder
// DRALAB_SCENARIOS names (one folder per scenario, as under scenarios/).
func (Scenario) List() error {
	all, from, err := scenarios.Selected()
	if err != nil {
		return err
	}
	if from != "built-in" {
		fmt.Printf("Scenarios of %s (%s):\n\n", from, scenarios.EnvDir)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SCENARIO\tTITLE")
	for _, s := range all {
		fmt.Fprintf(w, "%s\t%s\n", s.Name, s.Title)
	}
	w.Flush()
	fmt.Println("\nRun one with: go run mage.go scenario:run <scenario>")
	return nil
}

// Run runs a scenario on the running lab (as lab:status picks it: the lab
// of $DRALAB_LAB, else of $DRALAB_CONFIG, else the only one), prints each
// step's allocation table, and fails when an outcome differs from
// scenario.yaml. With DRALAB_SCENARIOS it runs one of that folder's
// scenarios.
func (Scenario) Run(ctx context.Context, name string) error {
	all, _, err := scenarios.Selected()
	if err != nil {
		return err
	}
	s, err := scenarios.Find(all, name)
	if err != nil {
		return err
	}
	l, err := lab.Existing()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", l.Kubeconfig())
	if err != nil {
		return fmt.Errorf("no lab to run on (%w); start one with: go run mage.go lab:up", err)
	}
	runner, err := scenarios.NewRunner(cfg)
	if err != nil {
		return err
	}
	runner.GPUFaults = lab.GPUFaults{Lab: l}
	u := ui.New(os.Stdout)
	u.Println(fmt.Sprintf("Scenario %s: %s", s.Name, s.Title))
	runner.OnStep = func(step string, rows []allocation.Row) {
		fmt.Printf("\n## %s\n\n", step)
		_ = allocation.WriteTable(os.Stdout, rows)
		fmt.Println()
	}
	done := u.Step("Running " + s.Name)
	res, err := runner.Run(ctx, s)
	if err == nil && !res.Passed() {
		err = fmt.Errorf("scenario %s: outcomes differ from %s:\n  %s", s.Name, s.Source("scenario.yaml"), strings.Join(res.Failures(), "\n  "))
	}
	done(err)
	if res != nil && len(res.Swept) > 0 {
		u.Println("Removed what interrupted runs left: " + strings.Join(res.Swept, ", "))
	}
	path, rerr := writeScenarioReport(ctx, s, res, err)
	if rerr != nil {
		u.Println(fmt.Sprintf("No HTML report: %v", rerr))
	} else {
		u.Println("Report: " + path)
	}
	if err != nil {
		return err
	}
	u.Println(fmt.Sprintf("\nEvery expected outcome held (%s).", res.Duration.Round(100_000_000)))
	return nil
}

// writeScenarioReport writes a run's HTML report into $ARTIFACTS, or else
// into dralab's cache directory (it outlives the lab), and returns its path.
func writeScenarioReport(ctx context.Context, s *scenarios.Scenario, res *scenarios.Result, runErr error) (string, error) {
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(cache, "dralab", "reports")
	}
	r, err := dashboard.ScenarioReport(ctx, s, res, runErr)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, fmt.Sprintf("scenario-%s-%s.html", s.Name, r.Generated.Format("20060102-150405")))
	return path, dashboard.WriteReportFile(path, r)
}
