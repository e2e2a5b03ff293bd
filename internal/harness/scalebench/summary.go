package scalebench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
)

// Spread is what repeated runs measured of one figure: the median and the
// lowest and highest run.
type Spread struct {
	Median float64 `json:"median"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
}

// spreadOf is the spread of values, the zero Spread for none; a value of
// 0 (not measured) is left out.
func spreadOf(values []float64) Spread {
	var v []float64
	for _, x := range values {
		if x != 0 {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return Spread{}
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Spread{Median: m, Min: v[0], Max: v[len(v)-1]}
}

// Includes reports whether x lies within the spread: a ratio whose spread
// includes 1 shows no effect the runs can tell from their noise.
func (s Spread) Includes(x float64) bool { return s.Min <= x && x <= s.Max }

// String is the median to two significant figures and, where the runs
// differ at that precision, their range: "61 (57–64)"; "-" for nothing
// measured.
func (s Spread) String() string {
	if s.Median == 0 {
		return "-"
	}
	m, lo, hi := sig2(s.Median), sig2(s.Min), sig2(s.Max)
	if lo == hi {
		return m
	}
	return fmt.Sprintf("%s (%s–%s)", m, lo, hi)
}

// sig2 writes v to two significant figures, without an exponent: 0.46,
// 1.2, 61, 330.
func sig2(v float64) string {
	if v == 0 {
		return "0"
	}
	d := int(math.Floor(math.Log10(math.Abs(v))))
	unit := math.Pow(10, float64(d-1))
	r := math.Round(v/unit) * unit
	// Rounding may carry into the next decade (99.6 → 100).
	if d2 := int(math.Floor(math.Log10(math.Abs(r)))); d2 > d {
		d = d2
	}
	return strconv.FormatFloat(r, 'f', max(0, 1-d), 64)
}

// Summary is a case's runs in one state and size taken together.
type Summary struct {
	Case   string `json:"case"`
	Source string `json:"source"`
	Pods   int    `json:"pods"`
	Groups int    `json:"groups,omitempty"`
	// Runs is how many runs there were.
	Runs          int    `json:"runs"`
	PodsPerSecond Spread `json:"podsPerSecond"`
	VsCounting    Spread `json:"vsCounting"`
	VsSinglePod   Spread `json:"vsSinglePod"`
	// CPUMillisPerPod is the lab process's CPU time per pod, in ms.
	CPUMillisPerPod Spread `json:"cpuMillisPerPod"`
	// P50 and P99 are the median run's (by pods/s) latency buckets.
	P50 Latency `json:"p50"`
	P99 Latency `json:"p99"`
}

// Summarize takes the runs of each case, state and size together, in the
// order they first ran.
func Summarize(results []Result) []Summary {
	var order []string
	byKey := map[string][]Result{}
	for _, r := range results {
		k := r.Source + " " + r.Case
		if byKey[k] == nil {
			order = append(order, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	var out []Summary
	for _, k := range order {
		runs := byKey[k]
		pick := func(f func(Result) float64) []float64 {
			v := make([]float64, len(runs))
			for i, r := range runs {
				v[i] = f(r)
			}
			return v
		}
		byRate := slices.Clone(runs)
		slices.SortFunc(byRate, func(a, b Result) int { return cmpFloat(a.PodsPerSecond, b.PodsPerSecond) })
		median := byRate[(len(byRate)-1)/2]
		out = append(out, Summary{
			Case: runs[0].Case, Source: runs[0].Source, Pods: runs[0].Pods, Groups: runs[0].Groups, Runs: len(runs),
			PodsPerSecond:   spreadOf(pick(func(r Result) float64 { return r.PodsPerSecond })),
			VsCounting:      spreadOf(pick(func(r Result) float64 { return r.VsCounting })),
			VsSinglePod:     spreadOf(pick(func(r Result) float64 { return r.VsSinglePod })),
			CPUMillisPerPod: spreadOf(pick(func(r Result) float64 { return r.CPUSecondsPerPod * 1000 })),
			P50:             median.P50, P99: median.P99,
		})
	}
	return out
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteSummary writes the summaries as an aligned table: medians to two
// significant figures with the runs' range, and a ratio whose range
// includes 1 marked "≈": no effect the runs can tell from their noise.
func WriteSummary(out io.Writer, summaries []Summary) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "case\tsource\truns\tpods\tpods/s\t÷ counting\t÷ single pod\tp50 ms\tp99 ms\tCPU ms/pod\t")
	for _, s := range summaries {
		pods := strconv.Itoa(s.Pods)
		if s.Groups > 0 {
			pods += fmt.Sprintf(" (%d)", s.Groups)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", s.Case, s.Source, s.Runs, pods, s.PodsPerSecond,
			ratio(s.VsCounting, s.Runs), ratio(s.VsSinglePod, s.Runs), s.P50, s.P99, s.CPUMillisPerPod)
	}
	return tw.Flush()
}

// ratio writes a ratio's spread, "≈" before one whose repeated runs
// differ and include 1 (not counting's own ratio, 1 every time).
func ratio(s Spread, runs int) string {
	if runs > 1 && s.Median != 0 && s.Min != s.Max && s.Includes(1) {
		return "≈ " + s.String()
	}
	return s.String()
}
