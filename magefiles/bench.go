//go:build mage

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/magefile/mage/mg"
	"github.com/magefile/mage/sh"

	"github.com/dralab/dralab/drivers/conformance/strictyaml"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
	"github.com/dralab/dralab/lab/scalebench"
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

// Scale measures scheduling throughput, latency, control-plane CPU per pod
// and peak RSS for counting and every kind of claim, on fresh embedded labs
// of 100 and 500 virtual nodes (DRALAB_BENCH_NODES=10,200 picks others;
// DRALAB_BENCH_CASES=counting,first-available some cases,
// DRALAB_BENCH_STATES=empty some states;
// DRALAB_BENCH_CONTROL_PLANE='{parallelism: 4}' tunes the labs). It prints
// a table and writes bench-scale.json and bench-scale.svg into $ARTIFACTS
// (else ~/.cache/dralab/bench). DRALAB_BENCH_UPSTREAM=1 also runs
// scheduler_perf's SchedulingWithResourceClaimTemplate beside the lab.
func (Bench) Scale(ctx context.Context) error {
	o := scalebench.Options{Nodes: scalebench.DefaultNodes}
	if v := os.Getenv("DRALAB_BENCH_NODES"); v != "" {
		nodes, err := scalebench.ParseNodes(v)
		if err != nil {
			return err
		}
		o.Nodes = nodes
	}
	if v := os.Getenv("DRALAB_BENCH_CASES"); v != "" {
		o.Cases = strings.Split(v, ",")
	}
	if v := os.Getenv("DRALAB_BENCH_STATES"); v != "" {
		o.States = strings.Split(v, ",")
	}
	if v := os.Getenv("DRALAB_BENCH_CONTROL_PLANE"); v != "" {
		o.ControlPlane = &config.ControlPlane{}
		if err := strictyaml.Decode([]byte(v), o.ControlPlane); err != nil {
			return fmt.Errorf("DRALAB_BENCH_CONTROL_PLANE: %w", err)
		}
	}
	dir := os.Getenv("ARTIFACTS")
	if dir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return err
		}
		dir = filepath.Join(cache, "dralab", "bench")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	bin, err := buildDralab(ctx)
	if err != nil {
		return err
	}
	o.Binary = bin
	u := ui.Stderr()
	o.Progress = func(run string) func(error) { return u.Step("Measuring " + run) }
	results, err := scalebench.Run(ctx, o)
	if err != nil {
		return err
	}
	var comparisons []scalebench.Comparison
	if os.Getenv("DRALAB_BENCH_UPSTREAM") == "1" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		more, cmp, err := scalebench.CompareUpstream(ctx, o, scalebench.UpstreamOptions{ModuleDir: wd, Output: os.Stderr, LogDir: filepath.Join(dir, "scheduler_perf")}, scalebench.UpstreamWorkloads)
		results = append(results, more...)
		if err != nil {
			return err
		}
		comparisons = cmp
	}
	if err := scalebench.WriteTable(os.Stdout, results, comparisons); err != nil {
		return err
	}
	jsonFile, svgFile := filepath.Join(dir, "bench-scale.json"), filepath.Join(dir, "bench-scale.svg")
	if err := scalebench.WriteJSON(jsonFile, results); err != nil {
		return err
	}
	if err := scalebench.WritePlot(svgFile, results); err != nil {
		return err
	}
	u.Println("Results: " + jsonFile + ", " + svgFile)
	return nil
}
