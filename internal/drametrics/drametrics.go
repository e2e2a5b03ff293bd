// Package drametrics reads what the components of a DRA cluster count about
// claims, from their Prometheus metrics: each kubelet's DRA operations and
// claims in use, the scheduler's DynamicResources plugin, and dralab's
// drivers' own prepare calls.
package drametrics

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names read.
const (
	KubeletOperations  = "dra_operations_duration_seconds"
	KubeletClaimsInUse = "dra_resource_claims_in_use"
	SchedulerPlugin    = "scheduler_plugin_execution_duration_seconds"
	SchedulerEvaluated = "scheduler_plugin_evaluation_total"
	DriverOperations   = "dralab_driver_claim_operations_total"
	DriverErrors       = "dralab_driver_claim_operation_errors_total"
	DriverPrepared     = "dralab_driver_prepared_claims"
	// DynamicResources is the scheduler's DRA plugin; AnyDriver the
	// kubelet's driver_name for claims of any driver.
	DynamicResources = "DynamicResources"
	AnyDriver        = "<any>"
)

// Timing is a histogram's count and sum: how many and how long in all.
type Timing struct {
	Count uint64
	Sum   float64
}

// Mean is the average duration in seconds (0 without observations).
func (t Timing) Mean() float64 {
	if t.Count == 0 {
		return 0
	}
	return t.Sum / float64(t.Count)
}

func (t Timing) String() string {
	if t.Count == 0 {
		return "0"
	}
	return fmt.Sprintf("%d, mean %s", t.Count, seconds(t.Mean()))
}

func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.1fms", s*1000)
	}
	return fmt.Sprintf("%.2fs", s)
}

// Kubelet is what a kubelet counts: NodePrepareResources and
// NodeUnprepareResources as the DRA manager timed them (errors included;
// Errors of them failed), and the claims in use by driver (AnyDriver: in
// all).
type Kubelet struct {
	Prepare, Unprepare Timing
	Errors             uint64
	ClaimsInUse        map[string]float64
}

// Scheduler is what the scheduler counts of its DRA plugin: evaluations
// by extension point (every scheduling cycle) and their durations
// (sampled: the scheduler times plugins in one cycle of ten).
type Scheduler struct {
	Evaluations map[string]float64
	Durations   map[string]Timing
}

// Driver is what a dralab driver counts: the claims the kubelet asked it
// to prepare and unprepare, those it failed, and those it holds prepared.
type Driver struct {
	Prepares, Unprepares, Errors, Prepared float64
}

func parse(r io.Reader, source string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return fams, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

func timing(m *dto.Metric) Timing {
	return Timing{Count: m.GetHistogram().GetSampleCount(), Sum: m.GetHistogram().GetSampleSum()}
}

func add(a, b Timing) Timing { return Timing{Count: a.Count + b.Count, Sum: a.Sum + b.Sum} }

// ParseKubelet reads a kubelet's /metrics.
func ParseKubelet(r io.Reader, source string) (Kubelet, error) {
	fams, err := parse(r, source)
	if err != nil {
		return Kubelet{}, err
	}
	k := Kubelet{ClaimsInUse: map[string]float64{}}
	for _, m := range fams[KubeletOperations].GetMetric() {
		t := timing(m)
		switch label(m, "operation_name") {
		case "PrepareResources":
			k.Prepare = add(k.Prepare, t)
		case "UnprepareResources":
			k.Unprepare = add(k.Unprepare, t)
		}
		if label(m, "is_error") == "true" {
			k.Errors += t.Count
		}
	}
	for _, m := range fams[KubeletClaimsInUse].GetMetric() {
		k.ClaimsInUse[label(m, "driver_name")] = value(m)
	}
	return k, nil
}

// ParseScheduler reads the scheduler's metrics (a scheduler pod's
// /metrics, or the control plane's, where the embedded lab's scheduler
// registers them).
func ParseScheduler(r io.Reader, source string) (Scheduler, error) {
	fams, err := parse(r, source)
	if err != nil {
		return Scheduler{}, err
	}
	s := Scheduler{Evaluations: map[string]float64{}, Durations: map[string]Timing{}}
	for _, m := range fams[SchedulerEvaluated].GetMetric() {
		if label(m, "plugin") == DynamicResources {
			s.Evaluations[label(m, "extension_point")] += value(m)
		}
	}
	for _, m := range fams[SchedulerPlugin].GetMetric() {
		if label(m, "plugin") == DynamicResources {
			p := label(m, "extension_point")
			s.Durations[p] = add(s.Durations[p], timing(m))
		}
	}
	return s, nil
}

// ParseDriver reads a dralab driver's /metrics.
func ParseDriver(r io.Reader, source string) (Driver, error) {
	fams, err := parse(r, source)
	if err != nil {
		return Driver{}, err
	}
	var d Driver
	for _, m := range fams[DriverOperations].GetMetric() {
		switch label(m, "operation") {
		case "prepare":
			d.Prepares += value(m)
		case "unprepare":
			d.Unprepares += value(m)
		}
	}
	for _, m := range fams[DriverErrors].GetMetric() {
		d.Errors += value(m)
	}
	for _, m := range fams[DriverPrepared].GetMetric() {
		d.Prepared += value(m)
	}
	return d, nil
}

// Node is one node's figures; a part that could not be read has its error
// instead.
type Node struct {
	Name       string
	Kubelet    Kubelet
	KubeletErr error
	// Drivers by name (gpu.dralab.dev, nic.dralab.dev): those whose
	// metrics the lab records.
	Drivers    map[string]Driver
	DriverErrs map[string]error
}

// Snapshot is the whole cluster's figures at one moment.
type Snapshot struct {
	Nodes        []Node
	Scheduler    Scheduler
	SchedulerErr error
}

// Write prints the snapshot: a table of nodes, then the scheduler's line.
func Write(w io.Writer, s *Snapshot) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tKUBELET PREPARES\tUNPREPARES\tERRORS\tCLAIMS IN USE\tDRIVER PREPARES\tDRIVER PREPARED NOW")
	for _, n := range s.Nodes {
		kube := []string{"?", "?", "?", "?"}
		if n.KubeletErr == nil {
			k := n.Kubelet
			kube = []string{k.Prepare.String(), k.Unprepare.String(), fmt.Sprint(k.Errors), FormatClaimsInUse(k.ClaimsInUse)}
		}
		var calls, held []string
		for _, name := range slices.Sorted(maps.Keys(n.Drivers)) {
			d := n.Drivers[name]
			calls = append(calls, fmt.Sprintf("%s %g", name, d.Prepares))
			held = append(held, fmt.Sprintf("%s %g", name, d.Prepared))
		}
		for _, name := range slices.Sorted(maps.Keys(n.DriverErrs)) {
			calls = append(calls, name+" ?")
			held = append(held, name+" ?")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n.Name, kube[0], kube[1], kube[2], kube[3], dash(strings.Join(calls, ", ")), dash(strings.Join(held, ", ")))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if s.SchedulerErr != nil {
		_, err := fmt.Fprintf(w, "\nScheduler: %v\n", s.SchedulerErr)
		return err
	}
	_, err := fmt.Fprintf(w, "\nScheduler, DynamicResources plugin evaluations: %s (timed in one cycle of ten)\n", s.Scheduler)
	if err != nil {
		return err
	}
	for _, n := range s.Nodes {
		if n.KubeletErr != nil {
			if _, err := fmt.Fprintf(w, "%s: kubelet metrics: %v\n", n.Name, n.KubeletErr); err != nil {
				return err
			}
		}
		for _, name := range slices.Sorted(maps.Keys(n.DriverErrs)) {
			if _, err := fmt.Fprintf(w, "%s: %s metrics: %v\n", n.Name, name, n.DriverErrs[name]); err != nil {
				return err
			}
		}
	}
	return nil
}

// String names the DynamicResources plugin's evaluations by extension
// point, with the sampled timings: "PreFilter 4 (timed 1, mean 0.2ms), …".
func (s Scheduler) String() string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(s.Evaluations)) {
		part := fmt.Sprintf("%s %g", p, s.Evaluations[p])
		if t, ok := s.Durations[p]; ok && t.Count > 0 {
			part += fmt.Sprintf(" (timed %d, mean %s)", t.Count, seconds(t.Mean()))
		}
		parts = append(parts, part)
	}
	return dash(strings.Join(parts, ", "))
}

// FormatClaimsInUse says a kubelet's claims in use: in all, and by driver
// where it counts them.
func FormatClaimsInUse(m map[string]float64) string {
	total := m[AnyDriver]
	var by []string
	for _, d := range slices.Sorted(maps.Keys(m)) {
		if d != AnyDriver && m[d] > 0 {
			by = append(by, fmt.Sprintf("%s %g", d, m[d]))
		}
	}
	if len(by) == 0 {
		return fmt.Sprintf("%g", total)
	}
	return fmt.Sprintf("%g (%s)", total, strings.Join(by, ", "))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
