package lab_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// BenchmarkUp measures the default lab from Up to every node Ready, with
// the dralab binary already built (a warm build): in all, and its two
// steps (the lab process until its control plane serves and its drivers
// run; then every node Ready with its devices published), and the CPU
// seconds the lab's processes spent to get there (on a machine of 2
// cores, a start is bound by the CPU once they near twice its seconds).
// It reports the lab's
// memory once every node is Ready, per role (the lab process with the
// control plane, a node, a GPU driver) and in total, two ways: PSS, each
// process's share of the pages it maps, so that the binary's pages, which
// every node (or driver) maps from the same file, count once in the total
// (what the lab takes from the machine), and RSS, which counts them in
// every process (what ps and top show).
//
//	go test ./lab -run '^$' -bench Up -benchtime 3x
func BenchmarkUp(b *testing.B) {
	bin := binary(b)
	ctx := context.Background()
	root, err := os.MkdirTemp("", "dl-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(root)
	cfg := config.Default()
	cfg.Name = "bench"
	steps := map[string]time.Duration{}
	progress := func(step string) func(error) {
		start := time.Now()
		return func(error) {
			for prefix, metric := range map[string]string{"Starting control plane": "s-lab-process", "Waiting for": "s-nodes-ready"} {
				if strings.HasPrefix(step, prefix) {
					steps[metric] += time.Since(start)
				}
			}
		}
	}
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root), lab.WithBinary(bin), lab.WithOwner(os.Getpid()), lab.WithProgress(progress))
	if err != nil {
		b.Fatal(err)
	}
	var sum struct{ cp, node, driver, total memory }
	var cpu float64
	b.ResetTimer()
	for range b.N {
		if _, err := l.Up(ctx); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st, err := l.Status(ctx)
		if err != nil {
			b.Fatal(err)
		}
		s, err := labstate.Dir(st.StateDir).ReadStatus()
		if err != nil {
			b.Fatal(err)
		}
		cpu += cpuSeconds(b, s.PID)
		for _, p := range s.Processes {
			cpu += cpuSeconds(b, p.PID)
		}
		cp := memoryOf(b, s.PID)
		sum.cp.add(cp, 1)
		sum.total.add(cp, 1)
		nodes, drivers := 0.0, 0.0
		for _, p := range s.Processes {
			if p.Role == labstate.RoleNode {
				nodes++
			} else {
				drivers++
			}
		}
		for _, p := range s.Processes {
			m := memoryOf(b, p.PID)
			sum.total.add(m, 1)
			if p.Role == labstate.RoleNode {
				sum.node.add(m, 1/nodes)
			} else {
				sum.driver.add(m, 1/drivers)
			}
		}
		if err := l.Down(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	for metric, d := range steps {
		b.ReportMetric(d.Seconds()/n, metric)
	}
	b.ReportMetric(cpu/n, "cpu-s")
	for _, m := range []struct {
		name string
		m    memory
	}{{"controlplane", sum.cp}, {"per-node", sum.node}, {"per-driver", sum.driver}, {"total", sum.total}} {
		b.ReportMetric(m.m.pss/n, "MiB-pss-"+m.name)
		b.ReportMetric(m.m.rss/n, "MiB-rss-"+m.name)
	}
}

// cpuSeconds is the CPU time (user and system) a process has spent.
func cpuSeconds(tb testing.TB, pid int) float64 {
	p, err := procfs.NewProc(pid)
	if err != nil {
		tb.Fatal(err)
	}
	st, err := p.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	return st.CPUTime()
}

// memory is a process's PSS and RSS, in MiB.
type memory struct{ pss, rss float64 }

func (m *memory) add(o memory, weight float64) {
	m.pss += o.pss * weight
	m.rss += o.rss * weight
}

// memoryOf reads a process's memory from /proc/PID/smaps_rollup.
func memoryOf(tb testing.TB, pid int) memory {
	m, ok := processMemory(pid)
	if !ok {
		tb.Fatalf("/proc/%d/smaps_rollup has no Rss and Pss", pid)
	}
	return m
}
