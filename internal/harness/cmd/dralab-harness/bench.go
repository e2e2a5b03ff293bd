package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dralab/dralab/drivers/conformance/strictyaml"
	"github.com/dralab/dralab/internal/harness/scalebench"
	"github.com/dralab/dralab/internal/ui"
	"github.com/dralab/dralab/lab/config"
)

// benchScale is bench:scale (magefiles/bench.go says what it measures).
func benchScale(ctx context.Context) error {
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
	if v := os.Getenv("DRALAB_BENCH_RUNS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("DRALAB_BENCH_RUNS=%q: how many times to measure each run, a number from 1", v)
		}
		o.Rounds = n
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
	o.LeftOut = func(run, why string) { u.Println(fmt.Sprintf(" - Leaving out %s: the case %s", run, why)) }
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
	if o.Rounds > 1 {
		fmt.Printf("\nMedians of %d runs each, to two significant figures, with the runs' range; ≈: a ratio whose runs include 1\n", o.Rounds)
		summaries := scalebench.Summarize(results)
		if err := scalebench.WriteSummary(os.Stdout, summaries); err != nil {
			return err
		}
		data, err := json.MarshalIndent(summaries, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "bench-scale-summary.json"), data, 0o644); err != nil {
			return err
		}
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
