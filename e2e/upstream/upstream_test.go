// Package upstream runs Kubernetes' own DRA e2e suite
// (k8s.io/kubernetes/test/e2e/dra, the version in go.mod) against dralab's
// embedded labs: its "control plane" specs, which need no container to
// exec into and no kubelet plugin, because the test driver publishes the
// ResourceSlices itself (driver.WithKubelet = false) and pods are only
// scheduled, or at most run on a hollow node that needs no image; the v1
// CRUD conformance specs; and the ResourceSlice controller spec. The labs
// have no registry, so whatever needs an image, an exec or a
// kubelet-registered test driver is left out by the label filter.
//
// The point is a second opinion on the labs: Kubernetes' own tests of the
// control plane's DRA behaviour (allocation, sharing, reuse, deallocation,
// extended resources, quota, admin access, status permissions, pool status)
// pass on them unchanged. Nothing is copied from upstream: the package
// imports the suite for its spec registrations and drives Ginkgo and the
// e2e framework itself.
//
// Each lab runs in a child process of the test binary (Ginkgo runs a suite
// once per process, and the e2e framework's configuration is global): the
// test starts the lab, runs itself again with the lab's kubeconfig and the
// lab's label filter in the environment, and reads back a summary of every
// spec. TestUpstreamFilter checks without a lab (it runs under -short) that
// the filters still select exactly the expected specs of the upstream
// version in go.mod.
package upstream

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	_ "k8s.io/kubernetes/test/e2e/dra" // the specs
	"k8s.io/kubernetes/test/e2e/framework"
	"k8s.io/kubernetes/test/e2e/framework/testfiles"
	e2etestingmanifests "k8s.io/kubernetes/test/e2e/testing-manifests"

	"github.com/dralab/dralab/internal/harness/scratchlab"
	"github.com/dralab/dralab/lab/config"
)

// controlPlane selects upstream's DRA specs that need no kubelet: every
// kubelet context is labelled Feature:DynamicResourceAllocation, which
// leaves the "control plane" contexts, the CRUD conformance specs and the
// ResourceSlice controller. The compatibility-group specs carry no such
// label but deploy a kubelet-registered driver and run pods, so they are
// left out by their gate.
const controlPlane = "DRA && !Feature:DynamicResourceAllocation && !FeatureGate:DRADeviceCompatibilityGroups"

// upstreamLab is a lab the suite runs on, with its filter and how many
// specs that filter selects in the upstream version in go.mod.
type upstreamLab struct {
	name, labName string
	// file is the example configuration, "" for config.Default().
	file   string
	filter string
	want   int
}

var labs = []upstreamLab{
	// The default lab runs Kubernetes' default gates: specs of a gate off
	// by default (the pool status, an alpha API) are left out.
	{name: "default", labName: "dralab-upstream", filter: controlPlane + " && !Feature:OffByDefault", want: 28},
	// The frontier lab turns on every DRA gate, alpha included, and serves
	// resource.k8s.io/v1alpha3: the pool-status specs run there too
	// ("control plane views" among them).
	{name: "frontier", labName: "dralab-upstream-frontier", file: "frontier.yaml", filter: controlPlane, want: 41},
}

// The child process's environment: the lab's kubeconfig, the label filter,
// where to write the summary, and the suite's timeout.
const (
	envKubeconfig = "DRALAB_UPSTREAM_KUBECONFIG"
	envFilter     = "DRALAB_UPSTREAM_FILTER"
	envSummary    = "DRALAB_UPSTREAM_SUMMARY"
	envTimeout    = "DRALAB_UPSTREAM_TIMEOUT"
)

func TestMain(m *testing.M) {
	if os.Getenv(envSummary) != "" {
		os.Exit(runChild())
	}
	os.Exit(m.Run())
}

// TestUpstreamDRA starts each lab and runs upstream's control-plane DRA
// specs on it; it fails when a spec fails or is skipped, or when fewer
// specs ran than the filter selected in the upstream version in go.mod.
func TestUpstreamDRA(t *testing.T) {
	for _, ul := range labs {
		t.Run(ul.name, func(t *testing.T) {
			if testing.Short() {
				t.Skip("starts an embedded lab and runs upstream's e2e specs on it: run without -short")
			}
			runOnLab(t, ul)
		})
	}
}

// TestUpstreamFilter checks, without a lab, that each lab's filter selects
// exactly the specs it should: as many as the lab expects, each a control
// plane, CRUD or ResourceSlice controller spec.
func TestUpstreamFilter(t *testing.T) {
	for _, ul := range labs {
		t.Run(ul.name, func(t *testing.T) {
			selected := previewSpecs(ul.filter)
			if len(selected) != ul.want {
				t.Errorf("the filter %q selects %d specs, want %d", ul.filter, len(selected), ul.want)
			}
			for _, name := range selected {
				if !strings.Contains(name, " control plane ") && !strings.Contains(name, " CRUD Tests ") && !strings.Contains(name, " ResourceSlice Controller ") {
					t.Errorf("the filter selects %q, which is no control plane, CRUD or ResourceSlice controller spec", name)
				}
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("the %s lab's filter %q selects %d specs:\n  %s", ul.name, ul.filter, len(selected), strings.Join(selected, "\n  "))
			}
		})
	}
}

func runOnLab(t *testing.T, ul upstreamLab) {
	ctx := context.Background()
	cfg := config.Default()
	if ul.file != "" {
		var err error
		if cfg, err = config.Example(ul.file); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	l, err := scratchlab.Start(ctx, cfg, ul.labName)
	t.Cleanup(func() {
		if err := scratchlab.Stop(context.Background(), l); err != nil {
			t.Errorf("deleting lab %s: %v", ul.labName, err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the %s lab started in %s", ul.name, time.Since(start).Round(time.Second))

	start = time.Now()
	s := runSuite(t, ul, l.Kubeconfig())
	elapsed := time.Since(start).Round(time.Second)
	passed := 0
	for _, sp := range s.Specs {
		switch sp.State {
		case types.SpecStatePassed.String():
			passed++
			if testing.Verbose() {
				t.Logf("passed %6s  %s", sp.RunTime, sp.Name)
			}
		default:
			t.Errorf("%s: %s\n%s\n%s", sp.State, sp.Name, sp.Failure, sp.Output)
		}
	}
	t.Logf("upstream DRA control-plane specs: %d of %d passed on the %s lab in %s", passed, len(s.Specs), ul.name, elapsed)
	switch {
	case len(s.Specs) == 0:
		t.Errorf("no upstream spec ran on the %s lab (filter %q)", ul.name, ul.filter)
	case len(s.Specs) < ul.want:
		t.Errorf("%d upstream specs ran on the %s lab, want %d (filter %q):\n%s", len(s.Specs), ul.name, ul.want, ul.filter, s.names())
	case len(s.Specs) > ul.want:
		t.Logf("%d upstream specs ran, %d more than the %d expected: the upstream suite grew; update want", len(s.Specs), len(s.Specs)-ul.want, ul.want)
	}
}

// summary is what the child process reports: every spec the filter
// selected, and whether the suite as a whole passed.
type summary struct {
	Passed bool
	Specs  []specResult
	// SuiteFailure is a failure outside the specs (a suite node).
	SuiteFailure string `json:",omitempty"`
}

type specResult struct {
	Name    string
	State   string
	RunTime string
	Failure string `json:",omitempty"`
	Output  string `json:",omitempty"`
}

func (s *summary) names() string {
	var b strings.Builder
	for _, sp := range s.Specs {
		fmt.Fprintf(&b, "  %s\n", sp.Name)
	}
	return b.String()
}

// previewSpecs returns the full names of the upstream specs that filter
// selects, sorted, without running any (Ginkgo's preview: a dry run of a
// copy of the spec tree, which this process may do any number of times).
func previewSpecs(filter string) []string {
	suiteConfig, reporterConfig := ginkgo.GinkgoConfiguration()
	suiteConfig.LabelFilter = filter
	report := ginkgo.PreviewSpecs("Kubernetes DRA e2e specs", suiteConfig, reporterConfig)
	var names []string
	for _, sr := range report.SpecReports {
		if sr.LeafNodeType == types.NodeTypeIt && sr.State != types.SpecStateSkipped {
			names = append(names, sr.FullText())
		}
	}
	slices.Sort(names)
	return names
}

// runSuite runs the test binary again as the suite's child process with
// ul's filter against kubeconfig, and returns its summary. The child's
// output goes to a log: in $ARTIFACTS when set, else in the test's
// temporary directory, and its tail into the test's log when no summary
// came back.
func runSuite(t *testing.T, ul upstreamLab, kubeconfig string) *summary {
	t.Helper()
	dir := t.TempDir()
	logDir := dir
	if a := os.Getenv("ARTIFACTS"); a != "" {
		logDir = a
	}
	logPath := filepath.Join(logDir, "upstream-dra-"+ul.name+".log")
	summaryPath := filepath.Join(dir, "summary.json")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()

	timeout := 45 * time.Minute
	if d, ok := t.Deadline(); ok {
		// Leave time to delete the lab.
		timeout = time.Until(d) - time.Minute
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envKubeconfig+"="+kubeconfig,
		envFilter+"="+ul.filter,
		envSummary+"="+summaryPath,
		envTimeout+"="+timeout.String(),
	)
	cmd.Stdout, cmd.Stderr = log, log
	runErr := cmd.Run()
	data, err := os.ReadFile(summaryPath)
	if err != nil {
		t.Fatalf("the upstream suite (%v) left no summary: %v; the end of its log %s:\n%s", runErr, err, logPath, tail(logPath, 60))
	}
	var s summary
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	if s.SuiteFailure != "" {
		t.Errorf("the upstream suite failed outside its specs: %s\nthe end of its log %s:\n%s", s.SuiteFailure, logPath, tail(logPath, 60))
	}
	return &s
}

func tail(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

// testingT is what Ginkgo's RunSpecs needs of a test.
type testingT struct{ failed bool }

func (t *testingT) Fail() { t.failed = true }

// runChild is the child process: it configures the e2e framework as
// upstream's e2e.test does (its flags' defaults, the lab's kubeconfig, the
// skeleton provider, the testing manifests embedded in the binary), runs
// the selected specs in one Ginkgo process, writes the summary and returns
// the exit code.
func runChild() int {
	summaryPath := os.Getenv(envSummary)

	// Registering the framework's flags on a set of our own gives
	// framework.TestContext their defaults without touching the test
	// binary's flags.
	fs := flag.NewFlagSet("e2e", flag.ContinueOnError)
	framework.RegisterCommonFlags(fs)
	framework.RegisterClusterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	framework.TestContext.KubeConfig = os.Getenv(envKubeconfig)
	framework.TestContext.Provider = "skeleton"
	testfiles.AddFileSource(e2etestingmanifests.GetE2ETestingManifestsFS())
	framework.AfterReadingAllFlags(&framework.TestContext)
	gomega.RegisterFailHandler(framework.Fail)

	suiteConfig, reporterConfig := ginkgo.GinkgoConfiguration()
	suiteConfig.LabelFilter = os.Getenv(envFilter)
	if d, err := time.ParseDuration(os.Getenv(envTimeout)); err == nil && d > 0 {
		suiteConfig.Timeout = d
	}
	reporterConfig.NoColor = true
	reporterConfig.Verbose = true

	var s summary
	ginkgo.ReportAfterSuite("dralab summary", func(r ginkgo.Report) {
		for _, sr := range r.SpecReports {
			switch {
			case sr.LeafNodeType != types.NodeTypeIt:
				if sr.State.Is(types.SpecStateFailureStates) {
					s.SuiteFailure += fmt.Sprintf("%s %s: %s (%s)\n", sr.LeafNodeType, sr.LeafNodeText, sr.Failure.Message, sr.Failure.Location)
				}
				continue
			case sr.State == types.SpecStateSkipped && sr.Failure.Message == "":
				// Not selected by the filter.
				continue
			}
			res := specResult{Name: sr.FullText(), State: sr.State.String(), RunTime: sr.RunTime.Round(100 * time.Millisecond).String()}
			if sr.State.Is(types.SpecStateFailureStates) || sr.State == types.SpecStateSkipped {
				res.Failure = fmt.Sprintf("%s\n%s", sr.Failure.Message, sr.Failure.Location)
				out := sr.CapturedGinkgoWriterOutput
				if len(out) > 20000 {
					out = "…" + out[len(out)-20000:]
				}
				res.Output = out
			}
			s.Specs = append(s.Specs, res)
		}
		s.Passed = r.SuiteSucceeded
		data, err := json.MarshalIndent(&s, "", "  ")
		if err == nil {
			err = os.WriteFile(summaryPath, data, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "writing the summary:", err)
		}
	})
	var t testingT
	ginkgo.RunSpecs(&t, "Kubernetes DRA e2e specs on a dralab lab", suiteConfig, reporterConfig)
	if t.failed {
		return 1
	}
	return 0
}
