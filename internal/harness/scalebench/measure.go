package scalebench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/metrics/testutil"
)

// attemptMetric is the scheduler's histogram of one scheduling attempt's
// duration (algorithm and binding), by result; the bench reads the
// attempts that scheduled a pod. The scheduler runs in the lab process,
// whose API server serves the process's metrics registry.
const attemptMetric = "scheduler_scheduling_attempt_duration_seconds"

// histogram is a snapshot of attemptMetric{result="scheduled"}.
type histogram struct {
	count   uint64
	buckets []*dto.Bucket
}

// schedulerAttempts reads the scheduled attempts' histogram from the API
// server's /metrics.
func schedulerAttempts(ctx context.Context, client kubernetes.Interface) (histogram, error) {
	raw, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return histogram{}, fmt.Errorf("reading the control plane's metrics: %w", err)
	}
	return parseAttempts(raw)
}

func parseAttempts(raw []byte) (histogram, error) {
	families, err := testutil.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return histogram{}, fmt.Errorf("parsing the control plane's metrics: %w", err)
	}
	fam, ok := families[attemptMetric]
	if !ok {
		// Before the first attempt the histogram has no series.
		return histogram{}, nil
	}
	for _, m := range fam.GetMetric() {
		if !testutil.LabelsMatch(m, map[string]string{"result": "scheduled"}) || m.GetHistogram() == nil {
			continue
		}
		h := m.GetHistogram()
		return histogram{count: h.GetSampleCount(), buckets: h.GetBucket()}, nil
	}
	return histogram{}, nil
}

// since is the histogram of the attempts after before.
func (h histogram) since(before histogram) histogram {
	out := histogram{count: h.count - before.count}
	for i, b := range h.buckets {
		c := b.GetCumulativeCount()
		if i < len(before.buckets) {
			c -= before.buckets[i].GetCumulativeCount()
		}
		out.buckets = append(out.buckets, &dto.Bucket{UpperBound: b.UpperBound, CumulativeCount: &c})
	}
	return out
}

// quantile is the bucket the q-quantile falls in: all a histogram can
// tell of it. Interpolating within the bucket, as Prometheus's
// histogram_quantile does, would print digits the exponential buckets
// (…, 0.512, 1.024, 2.048 s) never measured.
func (h histogram) quantile(q float64) Latency {
	if h.count == 0 {
		return Latency{}
	}
	rank := q * float64(h.count)
	low := 0.0
	for _, b := range h.buckets {
		if math.IsInf(b.GetUpperBound(), 1) {
			break
		}
		if float64(b.GetCumulativeCount()) >= rank {
			return Latency{LowSeconds: low, HighSeconds: b.GetUpperBound()}
		}
		low = b.GetUpperBound()
	}
	// Beyond the last finite bucket: above its bound, no upper limit known.
	return Latency{LowSeconds: low}
}

// Latency is a latency quantile: for the lab, the bucket of the scheduler's
// attempt histogram it falls in, LowSeconds < q ≤ HighSeconds; for
// scheduler_perf's runs, the estimate it reports (interpolated within
// the bucket), LowSeconds = HighSeconds. HighSeconds 0 above LowSeconds:
// beyond the histogram's last finite bucket.
type Latency struct {
	LowSeconds  float64 `json:"lowSeconds"`
	HighSeconds float64 `json:"highSeconds"`
}

// IsZero reports whether nothing was measured.
func (l Latency) IsZero() bool { return l.LowSeconds == 0 && l.HighSeconds == 0 }

// String is the latency in milliseconds: "(256, 512]" for a bucket, "≈6.0"
// for an estimate, "-" for none.
func (l Latency) String() string {
	ms := func(s float64) string { return strconv.FormatFloat(s*1000, 'f', -1, 64) }
	switch {
	case l.IsZero():
		return "-"
	case l.LowSeconds == l.HighSeconds:
		return fmt.Sprintf("≈%.1f", l.LowSeconds*1000)
	case l.HighSeconds == 0:
		return "> " + ms(l.LowSeconds)
	}
	return "(" + ms(l.LowSeconds) + ", " + ms(l.HighSeconds) + "]"
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat's CPU
// times: 100 on every Linux architecture Go runs on.
const clockTicks = 100

// cpuSeconds is the user and system CPU time of a process so far, its
// threads included.
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after it.
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	fields := strings.Fields(s[end+1:])
	// utime and stime are fields 14 and 15, the 12th and 13th after the name.
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += float64(v)
	}
	return ticks / clockTicks, nil
}

// peakRSS is a process's peak resident set (VmHWM) in bytes.
func peakRSS(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/status: VmHWM: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// resetPeakRSS starts a process's peak resident set afresh from its
// current one (Linux ≥ 4.0), so that the peak is the measured phase's.
// The bench only does it to the lab process it started.
func resetPeakRSS(pid int) error {
	err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
	if errors.Is(err, os.ErrPermission) {
		return fmt.Errorf("resetting the lab process's peak RSS: %w", err)
	}
	return err
}
