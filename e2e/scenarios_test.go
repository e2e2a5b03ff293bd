package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/e2e-framework/pkg/envconf"
	"sigs.k8s.io/e2e-framework/pkg/features"

	"github.com/dralab/dralab/drivers/conformance/allocation"
	"github.com/dralab/dralab/internal/dashboard"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/scenarios"
)

// TestScenarios runs every scenario as one feature, labelled
// scenario=<name> and tier=<fast|slow>: select with
// --labels scenario=prioritized-fallback or --skip-labels tier=slow.
func TestScenarios(t *testing.T) {
	requireCluster(t)
	all, from, err := scenarios.Selected()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("scenarios: %s", from)
	// The suite's own lab is the default lab, chosen for the built-in
	// scenarios: there only those known to need another lab may be unmet.
	// A cluster the user brought, or a folder of scenarios of one's own,
	// skips what the cluster cannot run.
	var policy unmetPolicy
	if theLab != nil && os.Getenv(scenarios.EnvDir) == "" {
		policy = unmetPolicy{lab: "the default lab (lab/examples/default.yaml)", expected: slices.Concat(partitionedScenarios, fabricScenarios, workloadScenarios, nicScenarios, frontierScenarios, cloudScenarios, racksScenarios), agree: true}
	}
	var feats []features.Feature
	for _, s := range all {
		feats = append(feats, features.New(s.Name).
			WithLabel("scenario", s.Name).
			WithLabel("tier", s.Labels["tier"]).
			Assess(s.Title, func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
				runScenario(ctx, t, cfg.Client().RESTConfig(), theLab, s, policy)
				return ctx
			}).
			Feature())
	}
	testenv.Test(t, feats...)
}

// unmetPolicy is how runScenario treats a scenario whose requirements the
// cluster does not meet. On a lab a test chose (lab set), that is a
// failure, but for the scenarios expected not to run there, which are
// skipped saying so; one of those that does run is a failure too, so the
// list stays exact. On a cluster the user brought (the zero policy), it is
// a skip with the reason.
type unmetPolicy struct {
	lab      string
	expected []string
	// agree: check that kubectl dra's reading agrees with the scheduler
	// at every step (agree).
	agree bool
}

// unmet handles a scenario's ErrUnmet.
func (p unmetPolicy) unmet(t *testing.T, s *scenarios.Scenario, err error) {
	t.Helper()
	switch {
	case p.lab == "":
		t.Skipf("skipped on this cluster, which the user chose: %v", err)
	case slices.Contains(p.expected, s.Name):
		t.Skipf("skipped, as expected on %s: %v", p.lab, err)
	default:
		t.Fatalf("%s was chosen to run scenario %s, but does not meet it: %v", p.lab, s.Name, err)
	}
}

// met checks that a scenario that ran was not expected to be unmet.
func (p unmetPolicy) met(t *testing.T, s *scenarios.Scenario) {
	t.Helper()
	if p.lab != "" && slices.Contains(p.expected, s.Name) {
		t.Errorf("scenario %s is listed as unmet on %s, but it ran: take it off the list", s.Name, p.lab)
	}
}

// runScenario runs one scenario on a cluster (the lab l's, or nil for a
// cluster the user brought, where no GPU can be failed) and fails the test
// on every mismatch; a cluster without what the scenario requires is as
// policy says.
func runScenario(ctx context.Context, t *testing.T, restConfig *rest.Config, l *lab.Lab, s *scenarios.Scenario, policy unmetPolicy) {
	runner, err := scenarios.NewRunner(restConfig)
	if err != nil {
		t.Fatal(err)
	}
	var client kubernetes.Interface
	if policy.agree {
		// kubectl dra's reading must agree with the scheduler at every
		// step (the default lab's scenarios and the matrix's).
		if client, err = kubernetes.NewForConfig(restConfig); err != nil {
			t.Fatal(err)
		}
	}
	runner.OnStep = func(step string, rows []allocation.Row) {
		t.Logf("%s:\n%s", step, allocation.Table(rows))
		if client != nil && len(rows) > 0 {
			agree(ctx, t, client, rows[0].Namespace)
		}
	}
	if l != nil {
		runner.GPUFaults = lab.GPUFaults{Lab: l}
	}
	runner.BeforeCleanup = func(ctx context.Context, res *scenarios.Result) {
		if !res.Passed() || t.Failed() {
			client, err := kubernetes.NewForConfig(restConfig)
			if err == nil {
				dumpDiagnostics(ctx, t, l, client, res.Namespace)
			}
		}
	}
	res, err := runner.Run(ctx, s)
	if errors.Is(err, scenarios.ErrUnmet) {
		policy.unmet(t, s, err)
	}
	policy.met(t, s)
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		writeReport(ctx, t, filepath.Join(dir, "scenario-"+s.Name+".html"), s, res, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Failures() {
		t.Errorf("%s: %s", s.Source("scenario.yaml"), f)
	}
	t.Logf("scenario %s took %s", s.Name, res.Duration)
}

// writeReport writes a scenario run's HTML allocation.
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

// TestScenarioFromFolder runs a scenario that is not built in: a workshop
// author's folder, written here into a temporary directory, loaded as
// DRALAB_SCENARIOS loads one, and run on the lab like the built-in ones.
func TestScenarioFromFolder(t *testing.T) {
	requireCluster(t)
	dir := t.TempDir()
	files := map[string]string{
		"scenario.yaml": `apiVersion: scenarios.dralab.dev/v1alpha1
kind: Scenario
name: my-inference
title: "A workshop's own scenario: inference on an L4, training on an H100"
summary: Two pods describe the GPU they need; each lands on its tier.
labels: {tier: fast}
requires:
  tiers: [h100, l4]
steps:
- name: the claims and the pods
  apply: [workload.yaml]
  expect:
  - pods: inference
    phase: Running
    tier: l4
  - pods: training
    phase: Running
    tier: h100
`,
		"workload.yaml": `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: l4}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: l4.gpu.dralab.dev}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: h100}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: h100.gpu.dralab.dev}
---
apiVersion: v1
kind: Pod
metadata: {name: inference}
spec:
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources: {claims: [{name: gpu}]}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: l4}]
---
apiVersion: v1
kind: Pod
metadata: {name: training}
spec:
  containers:
  - name: main
    image: registry.k8s.io/pause:3.10
    resources: {claims: [{name: gpu}]}
  resourceClaims: [{name: gpu, resourceClaimTemplateName: h100}]
`,
	}
	if err := os.Mkdir(filepath.Join(dir, "my-inference"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, "my-inference", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(scenarios.EnvDir, dir)
	all, from, err := scenarios.Selected()
	if err != nil {
		t.Fatal(err)
	}
	s, err := scenarios.Find(all, "my-inference")
	if err != nil || from != dir || len(all) != 1 {
		t.Fatalf("scenarios of %s: %v (%v)", dir, scenarios.Names(all), err)
	}
	feat := features.New(s.Name).
		Assess(s.Title, func(ctx context.Context, t *testing.T, cfg *envconf.Config) context.Context {
			runScenario(ctx, t, cfg.Client().RESTConfig(), theLab, s, unmetPolicy{})
			return ctx
		}).
		Feature()
	testenv.Test(t, feat)
}
