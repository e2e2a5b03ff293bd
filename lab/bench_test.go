package lab_test

import (
	"context"
	"os"
	"testing"

	"github.com/dralab/dralab/internal/labstate"
	"github.com/dralab/dralab/lab"
	"github.com/dralab/dralab/lab/config"
)

// BenchmarkUp measures the default lab from Up to every node Ready, with
// the dralab binary already built (a warm build), and reports the lab's
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
	l, err := lab.New(lab.WithConfig(cfg), lab.WithStateRoot(root), lab.WithBinary(bin), lab.WithOwner(os.Getpid()))
	if err != nil {
		b.Fatal(err)
	}
	var sum struct{ cp, node, driver, total memory }
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
	for _, m := range []struct {
		name string
		m    memory
	}{{"controlplane", sum.cp}, {"per-node", sum.node}, {"per-driver", sum.driver}, {"total", sum.total}} {
		b.ReportMetric(m.m.pss/n, "MiB-pss-"+m.name)
		b.ReportMetric(m.m.rss/n, "MiB-rss-"+m.name)
	}
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
