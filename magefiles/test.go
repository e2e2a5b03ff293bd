//go:build mage

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/magefile/mage/mg"

	"github.com/dralab/dralab/drivers/conformance/results"
	"github.com/dralab/dralab/drivers/conformance/target"
	"github.com/dralab/dralab/internal/build"
	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/scenarios"
)

// Test runs the test tiers.
type Test mg.Namespace

// modules are the repository's Go modules: dralab, and the conformance
// suite (drivers/conformance), a module of its own so that driver authors
// can install it without Kubernetes' own module.
var modules = []string{".", "drivers/conformance"}

// goEach runs go with args in every module, stopping at the first that
// fails.
func goEach(env map[string]string, args ...string) error {
	for _, dir := range modules {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		cmd.Env = os.Environ()
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		if mg.Verbose() || os.Getenv("CI") != "" {
			ui.Stderr().Println(fmt.Sprintf("exec: go %s (in %s)", strings.Join(args, " "), dir))
		}
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go %s in %s: %w", strings.Join(args, " "), dir, err)
		}
	}
	return nil
}

// Unit runs the hermetic unit tests (go test -short) of both modules:
// seconds, no lab.
func (Test) Unit() error {
	return goEach(nil, "test", "-short", "./...")
}

// E2E runs the e2e suite (every scenario, the driver and lab features) on
// an embedded lab it starts and deletes; with KUBECONFIG set, on that
// cluster when it is a dralab lab or DRALAB_TARGET names its context and server, else
// it refuses. It prints the target first. With $ARTIFACTS set it writes
// there junit-e2e.xml, e2e.html (a row per test, linking each scenario's
// own report) and every scenario's HTML report. With DRALAB_SCENARIOS it
// runs that folder's scenarios instead of the built-in ones.
func (Test) E2E(ctx context.Context) error {
	scenarioDir, err := scenarioFolder()
	if err != nil {
		return err
	}
	t, err := target.Resolve(target.Request{Kubeconfig: os.Getenv("KUBECONFIG"), Consent: os.Getenv(target.EnvConsent), Lab: labstate.LabOf})
	if err != nil {
		return err
	}
	if t != nil && len(t.Files) > 1 {
		// e2e-framework's --kubeconfig takes one file.
		return fmt.Errorf("KUBECONFIG lists %d files (%s): the e2e suite takes one; set KUBECONFIG to the file of the cluster to run on", len(t.Files), t.Kubeconfig)
	}
	ui.Stderr().Println("Target: " + t.String())
	bin, err := buildDralab(ctx)
	if err != nil {
		return err
	}
	args := []string{"test", "-count=1", "-timeout=30m", "-v", "./e2e"}
	if t != nil {
		args = append(args, "-args", "--kubeconfig="+t.Kubeconfig)
	}
	env := map[string]string{build.EnvBinary: bin}
	if scenarioDir != "" {
		env[scenarios.EnvDir] = scenarioDir
		ui.Stderr().Println("Scenarios: " + scenarioDir)
	}
	return goTestWithReports(ctx, env, args, ".", "e2e", "dralab e2e")
}

// scenarioFolder checks the folder DRALAB_SCENARIOS names, before anything
// is built, and returns it absolute (go test runs in the package's folder);
// "" when it is not set.
func scenarioFolder() (string, error) {
	dir := os.Getenv(scenarios.EnvDir)
	if dir == "" {
		return "", nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	if _, err := scenarios.LoadDir(abs); err != nil {
		return "", fmt.Errorf("%s=%s: %w", scenarios.EnvDir, dir, err)
	}
	return abs, nil
}

// failureLines is how much of a failed test's output goTestWithReports
// repeats after the run: its end, where it failed.
const failureLines = 40

// goTestWithReports runs go test with -json in module, showing its output
// as -v would; after a failure it repeats the end of each failed test's
// output. With $ARTIFACTS set it writes junit-<name>.xml and
// <name>.html there; a test whose scenario left scenario-<name>.html there
// links to it. It fails when the tests fail.
func goTestWithReports(ctx context.Context, env map[string]string, args []string, module, name, title string) error {
	args = slices.Insert(slices.Clone(args), 1, "-json")
	var events bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = module
	if mg.Verbose() || os.Getenv("CI") != "" {
		ui.Stderr().Println(fmt.Sprintf("exec: go %s (in %s)", strings.Join(args, " "), module))
	}
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout = io.MultiWriter(&events, results.Echo(os.Stdout))
	cmd.Stderr = os.Stderr
	runErr := cmd.Run()
	rep, err := results.Parse(&events)
	if err != nil {
		return errors.Join(runErr, err)
	}
	if tails := rep.FailureTails(failureLines); tails != "" {
		// After everything the run printed: a log read by its head and
		// tail, as CI's is, still shows what failed.
		fmt.Fprintf(os.Stderr, "\n== What failed, once more (the end of each failed test's output):\n%s", tails)
	}
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		if runErr == nil && rep.Failed() {
			runErr = errors.New("tests failed")
		}
		return runErr
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var xml bytes.Buffer
	if err := rep.WriteXML(&xml, title); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "junit-"+name+".xml"), xml.Bytes(), 0o644); err != nil {
		return err
	}
	links := map[string]string{}
	for _, c := range rep.Cases {
		parts := strings.Split(c.Name, "/")
		if len(parts) > 1 && parts[0] == "TestScenarios" {
			file := "scenario-" + parts[1] + ".html"
			if _, err := os.Stat(filepath.Join(dir, file)); err == nil {
				links[c.Name] = file
			}
		}
	}
	page := filepath.Join(dir, name+".html")
	if err := rep.WriteHTMLFile(page, title, links); err != nil {
		return err
	}
	ui.Stderr().Println("Reports: " + page + ", " + filepath.Join(dir, "junit-"+name+".xml"))
	if runErr == nil && rep.Failed() {
		runErr = errors.New("tests failed")
	}
	return runErr
}

// kindTests are the e2e tests that bring up kind labs.
const kindTests = "^(TestKindLab|TestKindNVMLLab)$"

// noVet leaves go vet out of a go test run where `go vet ./...` checks
// the same code with every analyzer (test:all runs it first) or where the
// run's purpose is not vet's (race, fuzzing, benchmarks). go test's own
// vet, a subset of the analyzers, analyses every dependency again for
// each way of building it: on a cold cache, after go vet, `go test` of
// drivers/kit (736 packages) took 55 s with it and 8 s without.
const noVet = "-vet=off"

// All installs the real node's host packages, Chromium (for the
// dashboard's browser tests) and the linux/arm64 C cross-compiler, builds
// the dralab binary once, vets both modules (once: the test runs after it
// leave go test's own vet out, noVet), then runs every test: the
// race detector's (test:race), every fuzz target for a few seconds
// (test:fuzz), then unit, integration (each starts its own embedded lab,
// one with a real node) and e2e, the e2e tests of kind labs last and
// alone; then bench:why (kubectl dra's targets at 5,000 nodes), and last a
// one-minute chaos soak (soak). From the race run to bench:why, every
// command is cross-compiled for linux/arm64 and darwin/arm64
// (test:platforms) in the background, at the lowest CPU priority: a cold
// cache's half hour of compiling then fills what the tests leave idle.
// This is what CI runs.
func (Test) All(ctx context.Context) error {
	mg.SerialDeps(Deps.Build, Deps.Realnode, Deps.Browser, Deps.Cross, Deps.Kind)
	bin, err := buildDralab(ctx)
	if err != nil {
		return err
	}
	if err := goEach(nil, "vet", "./..."); err != nil {
		return err
	}
	// The cross-builds run beside the tests, at the lowest priority; they
	// end with test:all on every path.
	ctx, cancel := context.WithCancel(ctx)
	cross := crossBuildBeside(ctx)
	defer func() {
		cancel()
		<-cross.done
	}()
	if err := (Test{}).Race(); err != nil {
		return err
	}
	if err := (Test{}).Fuzz(ctx); err != nil {
		return err
	}
	env := map[string]string{build.EnvBinary: bin}
	args := []string{"test", noVet, "-count=1", "-timeout=60m"}
	if os.Getenv("CI") != "" {
		args = append(args, "-v")
	}
	// The kind labs run alone, after every other test: a kind node takes
	// about 18 of the host's inotify instances (128 per user by default),
	// and beside the embedded labs the other packages run at the same
	// time (go test -p), kube-proxy in the nodes could not start its file
	// watcher, so the driver never reached the API server.
	for _, mod := range modules {
		name := "all"
		if mod != "." {
			name += "-" + filepath.Base(mod)
		}
		if err := goTestWithReports(ctx, env, append(args, "-skip", kindTests, "./..."), mod, name, "dralab test:all ("+mod+")"); err != nil {
			return err
		}
	}
	if err := goTestWithReports(ctx, env, append(args, "-run", kindTests, "./e2e"), ".", "kind", "dralab test:all (kind labs)"); err != nil {
		return err
	}
	if err := cross.join("test:platforms"); err != nil {
		return err
	}
	// Alone, after the tests and the cross-builds: a benchmark with
	// targets.
	if err := (Bench{}).Why(); err != nil {
		return err
	}
	return runSoak(ctx, ciSoak)
}

// buildDralab builds the dralab and driver binaries, showing the step.
func buildDralab(ctx context.Context) (string, error) {
	update, done := ui.Stderr().Live("Building dralab")
	bin, err := build.Dralab(build.WithReporter(ctx, func(p build.Progress) { update(p.String()) }))
	done(err)
	return bin, err
}
