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
	"strconv"
	"strings"
	"sync"

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
	return goTestWithReports(ctx, os.Stdout, env, args, ".", "e2e", "dralab e2e")
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
// on out as -v would; after a failure it repeats the end of each failed
// test's output. With $ARTIFACTS set it writes junit-<name>.xml and
// <name>.html there; a test whose scenario left scenario-<name>.html there
// links to it. It fails when the tests fail.
func goTestWithReports(ctx context.Context, out io.Writer, env map[string]string, args []string, module, name, title string) error {
	args = slices.Insert(slices.Clone(args), 1, "-json")
	var events bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = module
	if mg.Verbose() || os.Getenv("CI") != "" {
		fmt.Fprintf(out, "exec: go %s (in %s)\n", strings.Join(args, " "), module)
	}
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout = io.MultiWriter(&events, results.Echo(out))
	cmd.Stderr = out
	runErr := cmd.Run()
	rep, err := results.Parse(&events)
	if err != nil {
		return errors.Join(runErr, err)
	}
	tails := rep.FailureTails(failureLines)
	if tails != "" {
		// After everything the run printed: a log read by its head and
		// tail, as CI's is, still shows what failed.
		fmt.Fprintf(out, "\n== What failed, once more (the end of each failed test's output):\n%s", tails)
	}
	if runErr != nil || rep.Failed() {
		runErr = &testsFailed{title: title, tails: tails, err: runErr}
	}
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
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
	fmt.Fprintln(out, "Reports: "+page+", "+filepath.Join(dir, "junit-"+name+".xml"))
	return runErr
}

// testsFailed is a go test run that failed, with the end of each failed
// test's output.
type testsFailed struct {
	title, tails string
	err          error // go test's own, if any
}

func (e *testsFailed) Error() string {
	if e.err != nil {
		return e.title + ": tests failed (" + e.err.Error() + ")"
	}
	return e.title + ": tests failed"
}

// kindTests are the e2e tests that bring up kind labs.
const kindTests = "^(TestKindLab|TestKindNVMLLab)$"

// matrixTest is the e2e package's longest test, which runs every scenario
// on every example lab: test:all runs it in stage 1, beside the lab
// package, so that stage 2's e2e package is not the whole stage's tail.
const (
	matrixTestName = "TestScenarioMatrix"
	matrixTest     = "^" + matrixTestName + "$"
)

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
// leave go test's own vet out, noVet), checks every command for
// linux/arm64 and darwin/arm64 (test:platforms), then runs every test:
// the race detector's (test:race), every fuzz target for a few seconds
// (test:fuzz), builds the kind labs' node image (kind:nodeImage), then
// unit, integration (each starts its own embedded lab,
// one with a real node) and e2e, in two stages of runs side by side
// (testStages: the packages test:race ran whole left out, raceOnly; the
// kind labs beside the e2e packages where the host allows, never beside
// the real node); then bench:why (kubectl dra's targets at 5,000 nodes),
// and last a one-minute chaos soak (soak). It ends, passed or failed, with
// the seconds of each phase. This is what CI runs.
func (Test) All(ctx context.Context) error {
	ph := ui.NewPhases()
	defer writePhases(ph)
	if err := ph.Run("host packages (deps:build, realnode, browser, cross, kind)", func() error {
		mg.SerialDeps(Deps.Build, Deps.Realnode, Deps.Browser, Deps.Cross, Deps.Kind)
		return nil
	}); err != nil {
		return err
	}
	var bin string
	if err := ph.Run("dralab, dralab-driver", func() (err error) { bin, err = buildDralab(ctx); return err }); err != nil {
		return err
	}
	if err := ph.Run("go vet (both modules)", func() error { return goEach(nil, "vet", "./...") }); err != nil {
		return err
	}
	if err := ph.Run("test:platforms (linux/arm64, darwin/arm64)", func() error { return crossCheck(ctx, ui.Stderr()) }); err != nil {
		return err
	}
	if err := ph.Run("test:race", Test{}.Race); err != nil {
		return err
	}
	if err := ph.Run("test:fuzz", func() error { return Test{}.Fuzz(ctx) }); err != nil {
		return err
	}
	// Built before the tests, not inside TestKindLab beside the e2e
	// packages' labs: on a cold cache it compiles Kubernetes' commands
	// and makes a root filesystem (minutes of both cores).
	if err := ph.Run("kind:nodeImage", func() error { return Kind{}.NodeImage(ctx) }); err != nil {
		return err
	}
	stages, err := testStages(map[string]string{build.EnvBinary: bin})
	if err != nil {
		return err
	}
	for i, stage := range stages {
		if err := runStage(ctx, ph, i+1, stage); err != nil {
			return err
		}
	}
	// Alone, after the tests: a benchmark with targets.
	if err := ph.Run("bench:why", Bench{}.Why); err != nil {
		return err
	}
	return ph.Run("soak", func() error { return runSoak(ctx, ciSoak) })
}

// Quick is a change's loop, minutes where test:all takes most of an hour:
// go vet and the unit tests (go test -short) of both modules, then every
// scenario on one embedded lab of the default configuration (the e2e
// suite's TestScenarios, the scenarios that need another lab skipped as
// the suite lists them). Unchanged packages' unit tests come from go's
// test cache. It ends with the seconds of each phase.
func (Test) Quick(ctx context.Context) error {
	ph := ui.NewPhases()
	defer writePhases(ph)
	var bin string
	if err := ph.Run("dralab, dralab-driver", func() (err error) { bin, err = buildDralab(ctx); return err }); err != nil {
		return err
	}
	if err := ph.Run("go vet (both modules)", func() error { return goEach(nil, "vet", "./...") }); err != nil {
		return err
	}
	if err := ph.Run("go test -short (both modules)", func() error { return goEach(nil, "test", noVet, "-short", "./...") }); err != nil {
		return err
	}
	return ph.Run("the scenarios on one embedded lab", func() error {
		args := []string{"test", noVet, "-count=1", "-timeout=20m", "-run", "^TestScenarios$", "./e2e"}
		if os.Getenv("CI") != "" {
			args = append(args, "-v")
		}
		return goTestWithReports(ctx, os.Stdout, map[string]string{build.EnvBinary: bin}, args, ".", "quick", "dralab test:quick")
	})
}

// writePhases prints where a long target's time went, at its end whether
// it passed or failed.
func writePhases(ph *ui.Phases) {
	fmt.Fprintln(os.Stderr, "\n== Where the time went (seconds per phase):")
	_ = ph.Write(os.Stderr)
}

// packagesBut lists the packages of the module in dir, but those that
// patterns name.
func packagesBut(dir string, patterns []string) ([]string, error) {
	list := func(patterns ...string) ([]string, error) {
		cmd := exec.Command("go", append([]string{"list"}, patterns...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list %s (in %s): %w", strings.Join(patterns, " "), dir, err)
		}
		return strings.Fields(string(out)), nil
	}
	all, err := list("./...")
	if err != nil {
		return nil, err
	}
	var but []string
	for _, p := range patterns {
		// A pattern of the other module matches nothing here.
		if _, err := os.Stat(filepath.Join(dir, strings.TrimSuffix(p, "/..."))); err != nil {
			continue
		}
		named, err := list(p)
		if err != nil {
			return nil, err
		}
		but = append(but, named...)
	}
	return slices.DeleteFunc(all, func(p string) bool { return slices.Contains(but, p) }), nil
}

// realNodeTests are the lab package's tests of a real node, which compare
// the host's iptables, network namespaces and mounts before and after their
// lab: nothing else may change them meanwhile, as a kind lab's engine does.
const realNodeTests = "^(TestRealNode|TestChartOnRealNode)$"

// kindInotify is how many inotify instances per user (root's) a host needs
// for test:all to run the kind labs beside the e2e packages' embedded labs:
// a kind node takes about 18, an embedded lab's process 8 and each of its
// nodes 3. kind's own advice for hosts of several clusters is the same
// figure; .ci/run raises the limit to it.
const kindInotify = 512

// testRun is one go test invocation of test:all.
type testRun struct {
	name, title, module string
	// args follow go test's common flags: -run or -skip, and packages.
	args []string
	env  map[string]string
}

// testStages are test:all's go test runs after race and fuzzing, stage
// by stage; the runs of a stage run at once. The tests mostly wait on
// their labs (the CPU was 50–80 % idle with two packages at a time), so
// they run side by side, but never a kind lab beside a real node:
//
//  1. both modules' packages but the e2e ones and raceOnly, the lab
//     package in two runs, its real node's tests in one, and the e2e
//     package's scenario matrix (its embedded labs, one at a time);
//  2. the e2e packages (e2e but the matrix, e2e/conformance, e2e/upstream,
//     all three at once) and, where the host allows kindInotify inotify
//     instances, the kind labs beside them; elsewhere the kind labs run
//     alone after.
//
// Measured warm (2 cores): stage 1 407 s and stage 2 977 s with the matrix
// in stage 2 (the e2e package 958 s, 440 s of it the matrix; e2e/upstream
// and e2e/conformance 686 s each): the whole CI 1,852 s.
func testStages(env map[string]string) ([][]testRun, error) {
	common := []string{"-count=1", "-timeout=60m"}
	if os.Getenv("CI") != "" {
		common = append(common, "-v")
	}
	root, err := packagesBut(".", slices.Concat(raceOnly, []string{"./e2e/...", "./lab"}))
	if err != nil {
		return nil, err
	}
	light, err := packagesBut("drivers/conformance", raceOnly)
	if err != nil {
		return nil, err
	}
	run := func(name, title, module string, args ...string) testRun {
		return testRun{name: name, title: "dralab test:all (" + title + ")", module: module, args: slices.Concat(common, args), env: env}
	}
	first := []testRun{
		run("lab", "the lab package", ".", "-skip", realNodeTests, "./lab"),
		run("realnode", "the real node", ".", "-run", realNodeTests, "./lab"),
		run("all", ". but lab and e2e", ".", root...),
		run("all-conformance", "drivers/conformance", "drivers/conformance", light...),
		run("matrix", "the scenario matrix", ".", "-run", matrixTest, "./e2e"),
	}
	second := []testRun{run("e2e", "the e2e packages", ".", "-p=3", "-skip", strings.TrimSuffix(kindTests, ")$")+"|"+matrixTestName+")$", "./e2e", "./e2e/conformance", "./e2e/upstream")}
	kind := run("kind", "kind labs", ".", "-run", kindTests, "./e2e")
	if limit, err := inotifyInstances(); err == nil && limit >= kindInotify {
		return [][]testRun{first, append(second, kind)}, nil
	}
	kind.title += ", alone: fs.inotify.max_user_instances is under " + strconv.Itoa(kindInotify)
	return [][]testRun{first, second, {kind}}, nil
}

// inotifyInstances reads the host's limit of inotify instances per user.
func inotifyInstances() (int, error) {
	b, err := os.ReadFile("/proc/sys/fs/inotify/max_user_instances")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// runStage runs a stage's go test runs at once: the first shows its output
// as it comes, the others write theirs to a file each (under $ARTIFACTS,
// else a temporary folder), printed once every run of the stage has ended;
// then the end of each failed test's output again, so that a failed stage's
// log ends with what failed. It returns the runs' errors.
func runStage(ctx context.Context, ph *ui.Phases, n int, stage []testRun) error {
	errs := make([]error, len(stage))
	logs := make([]*os.File, len(stage))
	defer func() {
		for _, f := range logs {
			if f != nil {
				f.Close()
			}
		}
	}()
	var wg sync.WaitGroup
	for i, r := range stage {
		end := ph.Start(fmt.Sprintf("stage %d: go test %s", n, strings.TrimPrefix(r.title, "dralab test:all ")), i > 0)
		out := io.Writer(os.Stdout)
		if i > 0 {
			dir := os.Getenv("ARTIFACTS")
			if dir == "" {
				dir = os.TempDir()
			}
			f, err := os.Create(filepath.Join(dir, "go-test-"+r.name+".log"))
			if err != nil {
				end(err)
				errs[i] = err
				continue
			}
			logs[i], out = f, f
			ui.Stderr().Println(fmt.Sprintf("Stage %d: %s runs beside; its output goes to %s, printed here when the stage ends", n, r.title, f.Name()))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = goTestWithReports(ctx, out, r.env, slices.Concat([]string{"test", noVet}, r.args), r.module, r.name, r.title)
			end(errs[i])
		}()
	}
	wg.Wait()
	for i, f := range logs {
		if f == nil {
			continue
		}
		fmt.Fprintf(os.Stdout, "\n== %s (stage %d, beside): its output\n", stage[i].title, n)
		if _, err := f.Seek(0, io.SeekStart); err == nil {
			_, _ = io.Copy(os.Stdout, f)
		}
	}
	for _, err := range errs {
		if failed := (*testsFailed)(nil); errors.As(err, &failed) && failed.tails != "" && len(stage) > 1 {
			fmt.Fprintf(os.Stdout, "\n== What failed in %s, once more:\n%s", failed.title, failed.tails)
		}
	}
	return errors.Join(errs...)
}

// buildDralab builds the dralab and driver binaries, showing the step.
func buildDralab(ctx context.Context) (string, error) {
	update, done := ui.Stderr().Live("Building dralab")
	bin, err := build.Dralab(build.WithReporter(ctx, func(p build.Progress) { update(p.String()) }))
	done(err)
	return bin, err
}
