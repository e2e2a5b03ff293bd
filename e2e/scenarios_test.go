package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/internal/report"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/scenarios"
)

// TestScenarios runs every scenario as one feature, labelled
// scenario=<name> and tier=<fast|slow>: select with
// --labels scenario=prioritized-fallback or --skip-labels tier=slow.
func TestScenarios(t *testing.T) {
	requireCluster(t)
	all, err := scenarios.All()
	if err != nil {
		t.Fatal(err)
	}
	var feats []features.Feature
	for _, s := range all {
		feats = append(feats, features.New(s.Name).
			WithLabel("scenario", s.Name).
			WithLabel("tier", s.Labels["tier"]).
			Assess(s.Title, func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
				runScenario(ctx, t, cfg.Client().RESTConfig(), s)
				return ctx
			}).
			Feature())
	}
	testenv.Test(t, feats...)
}

// runScenario runs one scenario on a cluster and fails the test on every
// mismatch; a cluster without what the scenario requires skips it.
func runScenario(ctx context.Context, t *testing.T, restConfig *rest.Config, s *scenarios.Scenario) {
	runner, err := scenarios.NewRunner(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	runner.OnStep = func(step string, rows []report.Row) {
		t.Logf("%s:\n%s", step, report.Table(rows))
	}
	if theLab != nil {
		runner.GPUFaults = lab.GPUFaults{Lab: theLab}
	}
	runner.BeforeCleanup = func(ctx context.Context, res *scenarios.Result) {
		if !res.Passed() || t.Failed() {
			client, err := kubernetes.NewForConfig(restConfig)
			if err == nil {
				dumpDiagnostics(ctx, t, client, res.Namespace)
			}
		}
	}
	res, err := runner.Run(ctx, s)
	if errors.Is(err, scenarios.ErrUnmet) {
		t.Skipf("skipped on this cluster: %v", err)
	}
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		writeReport(ctx, t, filepath.Join(dir, "scenario-"+s.Name+".html"), s, res, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures() {
		t.Errorf("scenarios/%s/scenario.yaml: %s", s.Name, f)
	}
	t.Logf("scenario %s took %s", s.Name, res.Duration)
}

// writeReport writes a scenario run's HTML report.
func writeReport(ctx context.Context, t *testing.T, path string, s *scenarios.Scenario, res *scenarios.Result, runErr error) {
	t.Helper()
	r, err := dashboard.ScenarioReport(ctx, s, res, runErr)
	if err == nil {
		err = dashboard.WriteReportFile(path, r)
	}
	if err != nil {
		t.Errorf("writing the scenario's report: %v", err)
		return
	}
	t.Logf("report: %s", path)
}
